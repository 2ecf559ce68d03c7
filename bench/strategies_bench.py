#!/usr/bin/python3
"""bench/run strategies: the railway job under each distribution strategy, 2 trainers, one BLAS
thread each (as bench/run train), on the same data and seed.

Usage: strategies_bench.py RAILWAY_TRAIN
Cases:
  ps_async_samples_per_s_w2  parameter servers, async, with one rank slowed by 30 %
                             (RAILWAY_TRAIN_SLOW_RANK=1:0.3); peer: DDP slowed the same way, and
                             ps_sync as a second record. Target ratio >= 1.0: waiting is what async saves.
  ps_sync_job_samples_per_s_w2
                             the railway job on parameter servers, sync, no rank slowed; peer: DDP.
                             (ps_sync_samples_per_s_w2, printed by ps_bench before this script,
                             is the servers alone against PyTorch's RPC parameter server.)
  strategy_val_loss_rel_*    final validation loss after the same samples (2 epochs) for ps-sync,
                             ps-async, local-sgd (H = 4) and pipeline (2 stages, 8 micro-batches,
                             batch 64: DDP's global batch), relative to DDP's: (loss - ddp) / ddp.
  pipeline_samples_per_s_w2  that pipeline's throughput; peer: DDP (which needs the whole model per
                             trainer: the pipeline is for models that do not fit one).
Throughput is the mean of the epochs' samples_per_s as the job reports it (the evaluation not counted).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

train_bin = sys.argv[1]
work = tempfile.mkdtemp(prefix="yard-strategies-bench-")
SETTINGS = {"trainers": 2, "blas_threads": 1, "data": "16 logs of 12 km", "epochs": 2, "batch": 32}
JOB = ["--epochs", "2", "--logs", "16", "--length-km", "12", "--seed", "17", "--checkpoint-every", "1000"]
DP = ["--workers", "2", "--batch", "32"]


def emit(case, value, unit, peer=None, peer_value=None, **extra):
    rec = {"suite": "strategies", "case": case, "value": round(value, 4), "unit": unit}
    if peer is not None:
        rec.update(peer=peer, peer_value=round(peer_value, 4),
                   ratio=round(value / peer_value, 4) if peer_value else None)
    rec["settings"] = dict(SETTINGS, **extra)
    print(json.dumps(rec), flush=True)


def run(name, *extra, slow=None, layout=DP):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    if slow:
        env["RAILWAY_TRAIN_SLOW_RANK"] = slow
    out = f"{work}/{name}"
    with open(out + ".log", "w") as log:
        subprocess.run([train_bin, *JOB, *layout, "--data", f"{work}/data", "--out", out, *extra], stdout=log,
                       stderr=subprocess.STDOUT, env=env, check=True)
    epochs = [json.loads(l) for l in open(out + "/metrics.jsonl") if '"event":"epoch"' in l]
    rate = sum(e["samples_per_s"] for e in epochs) / len(epochs)
    shutil.rmtree(out + "/checkpoints", ignore_errors=True)
    return rate, epochs[-1]["val_loss"]


try:
    ddp_rate, ddp_loss = run("ddp")
    sync_rate, sync_loss = run("ps-sync", "--strategy", "ps")
    async_rate, async_loss = run("ps-async", "--strategy", "ps", "--ps-mode", "async")
    lsgd_rate, lsgd_loss = run("local-sgd", "--strategy", "local-sgd", "--sync-every", "4")
    pipe_rate, pipe_loss = run("pipeline", layout=["--pp", "2", "--workers", "2", "--micro-batches", "8", "--batch", "64"])
    ddp_slow, _ = run("ddp-slow", slow="1:0.3")
    sync_slow, _ = run("ps-sync-slow", "--strategy", "ps", slow="1:0.3")
    async_slow, _ = run("ps-async-slow", "--strategy", "ps", "--ps-mode", "async", slow="1:0.3")
    emit("ps_async_samples_per_s_w2", async_slow, "samples/s", "ddp_slowed_rank", ddp_slow, slowed="rank 1 by 30 %")
    emit("ps_async_samples_per_s_w2_vs_sync", async_slow, "samples/s", "ps_sync_slowed_rank", sync_slow,
         slowed="rank 1 by 30 %")
    emit("ps_sync_job_samples_per_s_w2", sync_rate, "samples/s", "ddp", ddp_rate)
    emit("pipeline_samples_per_s_w2", pipe_rate, "samples/s", "ddp", ddp_rate, pipeline="2 stages, 8 micro-batches, batch 64")
    for name, loss in [("ps_sync", sync_loss), ("ps_async", async_loss), ("local_sgd_h4", lsgd_loss),
                       ("pipeline", pipe_loss)]:
        emit("strategy_val_loss_rel_" + name, (loss - ddp_loss) / ddp_loss, "fraction", val_loss=round(loss, 5),
             ddp_val_loss=round(ddp_loss, 5))
finally:
    shutil.rmtree(work, ignore_errors=True)
