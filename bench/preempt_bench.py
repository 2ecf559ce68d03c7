#!/usr/bin/python3
"""bench/run shortage preempt: what a preemption costs a job's result, with real railway-train jobs
on a real cluster (a head and one-trainer nodes, each a `yard start`).

Usage: preempt_bench.py YARD RAILWAY_TRAIN
Cases:
  preempted_val_loss_rel  a low-priority elastic job (--replicas 1:2, --workers 1:2) on two trainer
                          nodes; once it trains with two trainers, a high-priority job needing one
                          trainer slot runs for 8 s: the low job gives a trainer up at a step
                          boundary and grows back after. Value: its final validation loss against
                          the same job undisturbed on the same nodes, |shrunk - undisturbed| /
                          undisturbed. Target <= 0.02. Settings: steps trained again (target 0),
                          and two undisturbed runs against each other (when the second trainer
                          joins varies, and with it the first steps' global batch).
  requeued_val_loss_rel   a low-priority job at MIN (--replicas 1, one trainer node); a high-priority
                          job needing the slot: the low job commits a checkpoint, stops, is queued
                          again and resumes after the high job. Value: its final validation loss
                          against the same job undisturbed. Target <= 1e-3. Settings: steps
                          trained again (target 0).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from cluster_bench import lines, wait_for

yard, train_bin = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
work = tempfile.mkdtemp(prefix="yard-preempt-bench-")
env = dict(os.environ, YARD_HOME=work + "/home", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
os.makedirs(env["YARD_HOME"])
TRAINER = '{"CPU": 1, "trainer": 1}'
COMMON = ["--logs", "2", "--length-km", "8", "--batch", "16", "--seed", "5", "--checkpoint-every", "20",
          "--trainer-resources", TRAINER, "--data", work + "/data", "--epochs", "4"]
SETTINGS = {"data": "2 logs of 8 km", "batch": 16, "epochs": 4, "blas_threads": 1,
            "nodes": "one-trainer nodes ({\"trainer\": 1}) beside a head of 2 CPU slots"}


def sh(*args, check=True):
    return subprocess.run([yard, *args], env=env, capture_output=True, text=True, check=check).stdout


def start_node():
    sh("start", "--address", env["YARD_ADDRESS"], "--num-cpus", "1", "--resources", '{"trainer": 1}',
       "--heartbeat-timeout", "2")



class Job:
    def __init__(self, name, replicas, workers, high=None):
        self.out, self.log = f"{work}/{name}", f"{work}/{name}.log"
        self.proc = subprocess.Popen(
            [yard, "submit", "--replicas", replicas, "--replica", "CPU=1,trainer=1", "--priority", "1", "--",
             train_bin, *COMMON, "--workers", workers, "--out", self.out],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT, env=env, cwd=work)

    def output(self):
        return open(self.log).read()

    def finish(self):
        if self.proc.wait(timeout=900) != 0:
            raise RuntimeError("the job failed: see " + self.log)
        metrics = lines(self.out + "/metrics.jsonl")
        val = [m["val_loss"] for m in metrics if m.get("event") == "epoch"][-1]
        redone = sum(m.get("steps_redone", 0) for m in metrics if m.get("event") == "recovery")
        return val, redone


def high_job(seconds):
    return sh("submit", "--no-wait", "--replicas", "1", "--replica", "CPU=1,trainer=1", "--priority", "5", "--",
              "sh", "-c", f"sleep {seconds}").strip().split()[-1]


def case(name, value, target, redone, **extra):
    print(json.dumps({"suite": "shortage", "case": name, "value": round(value, 6), "unit": "fraction",
                      "settings": dict(SETTINGS, target=target, steps_trained_again=redone, **extra)}), flush=True)


try:
    out = sh("start", "--head", "--port", "0", "--num-cpus", "2", "--heartbeat-timeout", "2")
    env["YARD_ADDRESS"] = re.search(r"started at (\S+)", out).group(1).rstrip(",")
    start_node()
    # At MIN on one trainer node: undisturbed, then stopped, requeued and resumed.
    base_val, _ = Job("min-undisturbed", "1", "1:1").finish()
    low = Job("min-requeued", "1", "1:1")
    wait_for(lambda: re.search(r"^epoch 1/4  steps", low.output(), re.M), "the low job's first epoch")
    high = high_job(5)
    wait_for(lambda: "stopped for the job queue" in low.output(), "the low job to stop for the queue")
    val, redone = low.finish()
    case("requeued_val_loss_rel", abs(val - base_val) / base_val, 1e-3, redone, high_job=high,
         val_loss=round(val, 6), undisturbed_val_loss=round(base_val, 6))
    # Above MIN on two trainer nodes: undisturbed, then shrunk for 8 s and grown back.
    start_node()
    base_val, _ = Job("elastic-undisturbed", "1:2", "1:2").finish()
    # The same job undisturbed again: when its second trainer joins varies from run to run, and with
    # it the global batch of the first steps; how far two undisturbed runs differ is the floor.
    again_val, _ = Job("elastic-undisturbed-again", "1:2", "1:2").finish()
    low = Job("elastic-shrunk", "1:2", "1:2")
    wait_for(lambda: re.search(r"(training with 2 trainers|resized: 1 -> 2 trainers)", low.output()),
             "the low job at two trainers")
    high = high_job(8)
    wait_for(lambda: "resized: 2 -> 1 trainers" in low.output(), "the low job to shrink")
    val, redone = low.finish()
    grew_back = len(re.findall(r"^resized: 1 -> 2 trainers", low.output(), re.M)) >= 1
    case("preempted_val_loss_rel", abs(val - base_val) / base_val, 0.02, redone, high_job=high,
         val_loss=round(val, 6), undisturbed_val_loss=round(base_val, 6), grew_back=grew_back,
         undisturbed_twice_rel=round(abs(again_val - base_val) / base_val, 6))
finally:
    subprocess.run([yard, "stop"], env=env, capture_output=True)
    if not os.environ.get("YARD_BENCH_KEEP"):
        shutil.rmtree(work, ignore_errors=True)
