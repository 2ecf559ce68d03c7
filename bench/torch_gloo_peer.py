#!/usr/bin/python3
"""The peer for bench/run collective: torch.distributed's gloo backend on the same sizes.

Usage: torch_gloo_peer.py WORLD PORT SIZES_BYTES...   (prints "op bytes seconds_per_op" per case)
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def iters_for(nbytes):
    return max(3, min(200, int(64e6 / max(nbytes, 1) * 0.5)))


def run(rank, world, port, sizes, out_path):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    lines = []
    for nbytes in sizes:
        n = nbytes // 4
        x = torch.ones(n, dtype=torch.float32)
        gathered = [torch.empty(n, dtype=torch.float32) for _ in range(world)]
        for op in ("allreduce", "broadcast", "allgather"):
            k = iters_for(nbytes)
            def step():
                if op == "allreduce":
                    dist.all_reduce(x)
                elif op == "broadcast":
                    dist.broadcast(x, 0)
                else:
                    dist.all_gather(gathered, x)
            for _ in range(2):
                step()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(k):
                step()
            dist.barrier()
            dt = (time.perf_counter() - t0) / k
            lines.append(f"{op} {nbytes} {dt:.9f}")
    if rank == 0:
        with open(out_path, "w") as f:
            f.write("\n".join(lines) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    world, port = int(sys.argv[1]), int(sys.argv[2])
    out_path = sys.argv[3]
    sizes = [int(s) for s in sys.argv[4:]]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(run, args=(world, port, sizes, out_path), nprocs=world, join=True)
