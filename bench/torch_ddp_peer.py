#!/usr/bin/python3
"""The peer for bench/run train: PyTorch DDP (gloo) on the same model, batch and threads.

Usage: torch_ddp_peer.py WORLD PORT D_MODEL LAYERS BATCH STEPS OUT
Prints nothing; writes "samples_per_s" to OUT from rank 0. PEER_BUCKET_VIEW=1: DDP with
gradient_as_bucket_view=True (gradients live in the buckets: one copy less per step), as a PyTorch
user tuning for speed would run it.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


FEATURES = 14  # as yard/railway/shards.h's kFeatures


class Net(nn.Module):
    def __init__(self, features, tokens, d, layers, heads):
        super().__init__()
        self.input = nn.Linear(features, d)
        self.pos = nn.Parameter(torch.randn(tokens, 1, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=2 * d, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.cls = nn.Linear(d, 5)
        self.tok = nn.Linear(d, 5)
        self.amp = nn.Linear(d, 1)

    def forward(self, x):
        h = self.input(x).transpose(0, 1) + self.pos
        h = self.encoder(h)
        t = h.size(0)
        middle = h[t // 4:3 * t // 4].max(0).values
        return self.cls(middle), self.tok(h).transpose(0, 1), self.amp(h.max(0).values).squeeze(-1)


TOKEN_WEIGHT = torch.tensor([0.1, 1.0, 1.0, 1.0, 1.0])


def railway_loss(out, y, tokens, a):
    # As yard/railway/model.h's railway_loss: window class, every token's (a defect's label also on
    # the token after it), amplitude.
    cls, tok, amp = out
    ringing = torch.cat([tokens[:, :1], tokens[:, :-1]], 1)
    shifted = torch.where(tokens.eq(0) & ringing.ne(4), ringing, tokens)
    return (nn.functional.cross_entropy(cls, y) +
            0.5 * nn.functional.cross_entropy(tok.reshape(-1, 5), shifted.reshape(-1), weight=TOKEN_WEIGHT) +
            nn.functional.mse_loss(amp, a))


def run(rank, world, port, d, layers, batch, steps, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(1)
    model = Net(FEATURES, 128, d, layers, 4)
    ddp = nn.parallel.DistributedDataParallel(
        model, gradient_as_bucket_view=os.environ.get("PEER_BUCKET_VIEW") == "1")
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    x = torch.randn(batch, 128, FEATURES)
    y = torch.randint(0, 5, (batch,))
    tokens = torch.randint(0, 5, (batch, 128))
    a = torch.randn(batch)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = railway_loss(ddp(x), y, tokens, a)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        with open(out, "w") as f:
            f.write(f"{steps * batch * world / dt}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    world, port, d, layers, batch, steps = (int(v) for v in sys.argv[1:7])
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(run, args=(world, port, d, layers, batch, steps, sys.argv[7]), nprocs=world, join=True)
