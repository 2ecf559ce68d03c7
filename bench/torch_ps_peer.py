#!/usr/bin/python3
"""The peer for bench/run strategies (ps_sync_samples_per_s_w2): a synchronous parameter server
in PyTorch's own way, torch.distributed.rpc over TensorPipe, as its tutorial "Batch-updating
parameter server" builds it: one server process holds the model and an AdamW optimizer; each of two
trainer processes computes gradients on its batch and calls the server with them
(rpc_sync, @rpc.functions.async_execution); when both have arrived the server averages, steps and
answers both with the new weights. The model, batch and threads are bench/torch_ddp_peer.py's.

Usage: torch_ps_peer.py PORT D_MODEL LAYERS BATCH STEPS OUT
Writes the trainers' samples/s to OUT.
"""
import os
import sys
import threading
import time

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ddp_peer import FEATURES, Net, railway_loss  # noqa: E402

TRAINERS = 2


class Server:
    def __init__(self, d, layers):
        torch.manual_seed(1)
        self.model = Net(FEATURES, 128, d, layers, 4)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.lock = threading.Lock()
        self.arrived = 0
        self.future = torch.futures.Future()
        for p in self.model.parameters():
            p.grad = torch.zeros_like(p)

    def weights(self):
        return [p.detach() for p in self.model.parameters()]

    @staticmethod
    @rpc.functions.async_execution
    def update_and_fetch(server_rref, grads):
        self = server_rref.local_value()
        with self.lock:
            for p, g in zip(self.model.parameters(), grads):
                p.grad += g
            self.arrived += 1
            fut = self.future
            if self.arrived == TRAINERS:
                for p in self.model.parameters():
                    p.grad /= TRAINERS
                self.opt.step()
                for p in self.model.parameters():
                    p.grad = torch.zeros_like(p)
                self.arrived = 0
                fut.set_result(self.weights())
                self.future = torch.futures.Future()
        return fut


def trainer(server_rref, d, layers, batch, steps, out, rank):
    torch.manual_seed(1)
    model = Net(FEATURES, 128, d, layers, 4)
    x = torch.randn(batch, 128, FEATURES)
    y = torch.randint(0, 5, (batch,))
    tokens = torch.randint(0, 5, (batch, 128))
    a = torch.randn(batch)
    params = list(model.parameters())

    def step():
        for p in params:
            p.grad = None
        railway_loss(model(x), y, tokens, a).backward()
        new = rpc.rpc_sync(server_rref.owner(), Server.update_and_fetch, args=(server_rref, [p.grad for p in params]))
        with torch.no_grad():
            for p, w in zip(params, new):
                p.copy_(w)

    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * batch / (time.perf_counter() - t0)


def run(rank, port, d, layers, batch, steps, out):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, rpc_timeout=600)
    name = "ps" if rank == 0 else f"trainer{rank}"
    rpc.init_rpc(name, rank=rank, world_size=TRAINERS + 1, rpc_backend_options=opts)
    if rank == 0:
        server = rpc.RRef(Server(d, layers))
        futs = [rpc.rpc_async(f"trainer{r}", trainer, args=(server, d, layers, batch, steps, out, r))
                for r in range(1, TRAINERS + 1)]
        rates = [f.wait() for f in futs]
        with open(out, "w") as f:
            f.write(f"{sum(rates)}\n")
    rpc.shutdown()


if __name__ == "__main__":
    port, d, layers, batch, steps = (int(v) for v in sys.argv[1:6])
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(run, args=(port, d, layers, batch, steps, sys.argv[6]), nprocs=TRAINERS + 1, join=True)
