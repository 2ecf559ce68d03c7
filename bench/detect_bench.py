#!/usr/bin/python3
"""bench/run railway (model cases): the demo's training job, aligned and not, then the detector.

Usage: detect_bench.py BUILD_APPS_DIR
Cases: defect_macro_f1_heldout (held-out track, the demo's job; peer: the same job on unaligned
shards), demo_job_minutes (that job's wall time, recording the logs included), detect_precision_2m and detect_recall_2m (the trained model on a line it has never seen,
at the simulator's natural defect density, ±2 m), detect_x_realtime (train-seconds of that log
scanned per wall second, alignment included, every core).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

apps = sys.argv[1]
work = tempfile.mkdtemp(prefix="yard-detect-bench-")


def emit(case, value, unit, peer=None, peer_value=None):
    rec = {"suite": "railway", "case": case, "value": round(value, 4), "unit": unit}
    if peer is not None:
        rec.update(peer=peer, peer_value=round(peer_value, 4), ratio=round(value / peer_value, 4) if peer_value else None,
                   settings="the same job, data, seed and process settings for both; only the shards' alignment differs")
    print(json.dumps(rec), flush=True)


def train(out, *extra):
    cmd = [f"{apps}/railway-train", "--workers", "2", "--epochs", "2", "--logs", "64", "--length-km", "25",
           "--data", f"{work}/data", "--out", f"{work}/{out}", *extra]
    log = open(f"{work}/{out}.log", "w")
    subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True)
    last = [json.loads(l) for l in open(f"{work}/{out}/metrics.jsonl") if '"event":"epoch"' in l][-1]
    return last["val_macro_f1"]


try:
    t0 = time.monotonic()
    aligned = train("aligned")
    demo_minutes = (time.monotonic() - t0) / 60
    unaligned = train("unaligned", "--unaligned")
    emit("defect_macro_f1_heldout", aligned, "F1", "unaligned_shards", unaligned)
    # The demo's job from nothing: recording and aligning the logs, training, every evaluation.
    emit("demo_job_minutes", demo_minutes, "min")
    subprocess.run([f"{apps}/railway-sim", "--seed", "900", "--length-km", "25", "--out", f"{work}/unseen"],
                   stdout=subprocess.DEVNULL, check=True)
    r = subprocess.run([f"{apps}/railway-detect", "--model", f"{work}/aligned/checkpoints", "--in", f"{work}/unseen",
                        "--score", "--out", f"{work}/defects.csv"], capture_output=True, text=True, check=True)
    sys.stderr.write(r.stdout)
    p = float(re.search(r"precision ([0-9.]+)", r.stdout).group(1))
    rec = float(re.search(r"recall ([0-9.]+)", r.stdout).group(1))
    m = re.search(r"in ([0-9.]+) s \(([0-9.]+)x real time\)", r.stdout)
    emit("detect_precision_2m", p, "fraction")
    emit("detect_recall_2m", rec, "fraction")
    emit("detect_x_realtime", float(m.group(2)), "x")
finally:
    shutil.rmtree(work, ignore_errors=True)
