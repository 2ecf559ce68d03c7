#!/usr/bin/python3
"""bench/run elastic: the railway job on a real cluster (a head and node managers, each a
`yard start`), trainers on the nodes that offer {"trainer": 1}, one BLAS thread each.

Usage: elastic_train_bench.py YARD RAILWAY_TRAIN
Cases:
  grow_pause_s          an elastic job (--workers 2:3) on two trainer nodes; a third node joins and
                        the job grows to 3 trainers: the longest gap between two training steps
                        around the change (steps.jsonl's step end times). Peer, in the same run: the
                        restart-from-checkpoint path a fixed job (--workers 2) takes when its
                        membership changes, the torchrun way (here: a trainer killed with kill -9;
                        the group restarts from the newest checkpoint): the time from the last step
                        before to the first new step after (the steps trained again since the
                        checkpoint are no progress; an elastic group trains none again).
                        Target <= 2 s, ratio <= 0.3.
  shrink_pause_s        the same elastic job when the third node is drained (`yard drain`): 3 -> 2.
  elastic_val_loss_rel  the elastic run's final validation loss (2 -> 3 -> 2 trainers) against the
                        fixed 2-trainer run's (same data, seed and epochs: the same samples):
                        |elastic - fixed| / fixed. Target <= 0.02.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

yard, train_bin = sys.argv[1], sys.argv[2]
work = tempfile.mkdtemp(prefix="yard-elastic-train-bench-")
env = dict(os.environ, YARD_HOME=work + "/home", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
os.makedirs(env["YARD_HOME"])
COMMON = ["--logs", "4", "--length-km", "10", "--batch", "32", "--seed", "17", "--checkpoint-every", "20",
          "--trainer-resources", '{"CPU": 1, "trainer": 1}', "--data", work + "/data"]
JOB = COMMON + ["--epochs", "3"]  # sized by steps, not time, once the data's size is known (size_job)
SETTINGS = {"blas_threads": 1, "data": "4 logs of 10 km", "epochs": 3, "batch": 32, "checkpoint_every": 20,
            "cluster": "a head and one-trainer nodes on this machine"}
# Batches of 32 the elastic run needs: 30 steps at 2 trainers, the steps at 2 while the third
# node joins and prepares (up to 60), 30 at 3, and at least 60 steps at 2 after the drain, so
# that the job is still training when the drained replica leaves however fast the machine is.
BATCHES_NEEDED = 30 * 2 + 60 * 2 + 30 * 3 + 60 * 2


def size_job(warm_output):
    """Epochs enough for BATCHES_NEEDED, from the warm run's "N steps per epoch" (one trainer:
    one batch per step)."""
    per_epoch = int(re.search(r"(\d+) steps per epoch", warm_output).group(1))
    epochs = max(3, -(-BATCHES_NEEDED // per_epoch))
    JOB[JOB.index("--epochs") + 1] = str(epochs)
    SETTINGS["epochs"] = epochs
    SETTINGS["batches_per_epoch"] = per_epoch


def sh(*args, check=True):
    return subprocess.run([yard, *args], env=env, capture_output=True, text=True, check=check).stdout


def start_node():
    out = sh("start", "--address", address, "--num-cpus", "1", "--resources", '{"trainer": 1}', "--port", "0")
    return out.split(" started at ")[1].split(",")[0]  # its address


def node_id(addr):
    for n in json.loads(sh("status", "--json"))["nodes"]:
        if n.get("address") == addr:
            return n["node_id"]
    raise RuntimeError("no node at " + addr)


def lines(path, event=None):
    try:
        with open(path) as f:
            out = [json.loads(l) for l in f if l.strip()]
    except FileNotFoundError:
        return []
    return [j for j in out if event is None or j.get("event") == event]


def wait_for(cond, what, timeout=300):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return
        if job.poll() is not None:
            raise RuntimeError(f"the job ended ({job.returncode}) while waiting for {what}; see {log_path}")
        time.sleep(0.05)
    raise RuntimeError("timed out waiting for " + what)


def launch(name, *extra):
    global job, log_path
    out = f"{work}/{name}"
    log_path = out + ".log"
    job = subprocess.Popen([train_bin, *JOB, "--out", out, *extra], stdout=open(log_path, "w"),
                           stderr=subprocess.STDOUT, env=dict(env, YARD_ADDRESS=address))
    return out


def finish(out):
    if job.wait(timeout=900) != 0:
        raise RuntimeError(f"the job failed; see {log_path}")
    return lines(out + "/metrics.jsonl", "epoch")[-1]["val_loss"]


def emit(case, value, unit, peer=None, peer_value=None, **extra):
    rec = {"suite": "elastic", "case": case, "value": round(value, 4), "unit": unit}
    if peer is not None:
        rec.update(peer=peer, peer_value=round(peer_value, 4), ratio=round(value / peer_value, 4) if peer_value else None)
    rec["settings"] = dict(SETTINGS, **extra)
    print(json.dumps(rec), flush=True)


job = None
log_path = ""
try:
    address = sh("start", "--head", "--port", "0", "--num-cpus", "4").split(" started at ")[1].split(" ")[0]
    start_node()
    start_node()
    # The data, made once for both runs (aligned shards), by a short run.
    warm = subprocess.run([train_bin, *COMMON, "--epochs", "1", "--workers", "1", "--out", work + "/warm"],
                          env=dict(env, YARD_ADDRESS=address), capture_output=True, text=True, check=True)
    size_job(warm.stdout)

    # Ours: 2 -> 3 when a node joins, 3 -> 2 when it is drained.
    out = launch("elastic", "--workers", "2:3")
    wait_for(lambda: len(lines(out + "/steps.jsonl")) >= 30, "30 steps")
    third = start_node()
    wait_for(lambda: any(r["new_world"] == 3 for r in lines(out + "/metrics.jsonl", "resize")), "growing to 3")
    grown = len(lines(out + "/steps.jsonl"))
    wait_for(lambda: len(lines(out + "/steps.jsonl")) >= grown + 30, "30 steps at 3")
    sh("drain", node_id(third), "--timeout", "120")
    wait_for(lambda: any(r["old_world"] == 3 and r["new_world"] == 2
                         for r in lines(out + "/metrics.jsonl", "resize")), "shrinking to 2")
    elastic_loss = finish(out)
    resizes = lines(out + "/metrics.jsonl", "resize")
    grow = max(r["pause_s"] for r in resizes if r["new_world"] > r["old_world"])
    shrink = max(r["pause_s"] for r in resizes if r["new_world"] < r["old_world"])

    # The peer: a fixed group of 2 restarts from its newest checkpoint when a trainer is lost.
    out = launch("fixed", "--workers", "2")
    wait_for(lambda: len(lines(out + "/steps.jsonl")) >= 30, "30 steps")
    with open(log_path) as f:
        pids = [l.split(":")[1].split() for l in f if l.startswith("trainer pids:")][-1]
    last = lines(out + "/steps.jsonl")[-1]
    os.kill(int(pids[1]), signal.SIGKILL)

    def new_steps():  # steps beyond the furthest trained before the loss (the redone ones do not count)
        return [s for s in lines(out + "/steps.jsonl") if s["step"] > last["step"] and s.get("t", 0) > last["t"]]
    wait_for(lambda: new_steps(), "a new step after the restart")
    restart = min(s["t"] for s in new_steps()) - last["t"]
    fixed_loss = finish(out)

    emit("grow_pause_s", grow, "s", "restart_from_checkpoint", restart, resize="2 -> 3 trainers (a node joined)")
    emit("shrink_pause_s", shrink, "s", "restart_from_checkpoint", restart, resize="3 -> 2 trainers (yard drain)")
    emit("elastic_val_loss_rel", abs(elastic_loss - fixed_loss) / fixed_loss, "fraction", elastic_val_loss=round(elastic_loss, 5),
         fixed_val_loss=round(fixed_loss, 5))
finally:
    if job is not None and job.poll() is None:
        job.kill()
    subprocess.run([yard, "stop"], env=env, capture_output=True)
    if not os.environ.get("YARD_BENCH_KEEP"):
        shutil.rmtree(work, ignore_errors=True)
