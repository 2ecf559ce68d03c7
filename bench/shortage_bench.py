#!/usr/bin/python3
"""bench/run shortage: the job queue on a pool that is short, with real railway-train jobs, the real
head and node managers (each a `yard start`). The pool: two nodes of two trainer slots each
(declared slots, not cores: {"trainer": 2}); every trainer holds one slot and one BLAS thread.

Usage: shortage_bench.py YARD RAILWAY_TRAIN [TRIALS]   (TRIALS default 10)
Cases:
  high_priority_start_s  two low-priority elastic jobs (--replicas 1:2, priority 1) fill the pool; a
                         high-priority job needing two slots (priority 5) is submitted: submission
                         -> its first training step, the largest over TRIALS trials (p99 for 10 or
                         fewer). Peer, in the same run: the same job's submission -> first step on
                         the idle pool. Target ratio <= 1.5. Settings: loaded_pool_start_s, the
                         same start with the same load and free slots (no preemption).
  capacity_freed_s       submission -> the victims' replicas gone (their groups formed without
                         them), the largest over the trials. Target <= 1 s.
  preempted_steps_lost   steps the low jobs trained again over all trials (checkpoint reads and
                         redone steps). Target 0. Settings: the longest time from the high job's
                         end to both low jobs back at two trainers (target: 2 s plus one
                         replica's start).
  drain_to_shrink_s      `yard drain NODE --deadline 60` (a notice) of a node holding a replica
                         above MIN of each low job -> both groups stepping without it (the later
                         of the two). Target <= 1 s.
  spot_notice_steps_lost a notice (`--deadline 30`) on the last trainer node, where both low jobs
                         are at MIN with nowhere to move: each commits a checkpoint and is
                         requeued; two new nodes join and they resume. Value: steps trained again.
                         Target 0; settings: how long before the deadline the later checkpoint
                         was committed (target >= 10 s).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from cluster_bench import lines, wait_for

yard, train_bin = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
trials = int(sys.argv[3]) if len(sys.argv) > 3 else 10
work = tempfile.mkdtemp(prefix="yard-shortage-bench-")
env = dict(os.environ, YARD_HOME=work + "/home", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
os.makedirs(env["YARD_HOME"])
TRAINER = '{"CPU": 1, "trainer": 1}'
COMMON = ["--logs", "2", "--length-km", "8", "--batch", "16", "--seed", "5", "--checkpoint-every", "40",
          "--trainer-resources", TRAINER, "--data", work + "/data"]
SETTINGS = {"pool": "2 nodes x 2 trainer slots (declared), a head with 8 CPU slots", "blas_threads": 1,
            "data": "2 logs of 8 km", "batch": 16, "low_jobs": "2 x --replicas 1:2, priority 1",
            "high_job": "--replicas 2, priority 5", "trials": trials}


def sh(*args, check=True):
    return subprocess.run([yard, *args], env=env, capture_output=True, text=True, check=check).stdout


def start_node():
    out = sh("start", "--address", address, "--num-cpus", "2", "--resources", '{"trainer": 2}', "--port", "0",
             "--heartbeat-timeout", "2")
    return out.split(" started at ")[1].split(",")[0]


def node_ids():
    return {n["address"]: n["node_id"] for n in json.loads(sh("status", "--json"))["nodes"] if n.get("address")}




class Job:
    """A railway job submitted to the queue; its output under work/NAME."""

    def __init__(self, name, replicas, priority, epochs, workers):
        self.out = f"{work}/{name}"
        self.log = open(f"{work}/{name}.log", "w")
        self.t_submit = time.time()
        self.proc = subprocess.Popen(
            [yard, "submit", "--replicas", replicas, "--replica", "CPU=1,trainer=1", "--priority", str(priority), "--",
             train_bin, *COMMON, "--epochs", str(epochs), "--workers", workers, "--out", self.out],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=work)
        self.id = None

    def job_id(self):
        if not self.id:
            wait_for(lambda: re.search(r"submitted (job-\d+)", open(self.log.name).read()), "the job's id", 60)
            self.id = re.search(r"submitted (job-\d+)", open(self.log.name).read()).group(1)
        return self.id

    def steps(self):
        return lines(self.out + "/steps.jsonl")

    def resizes(self):
        return lines(self.out + "/metrics.jsonl", "resize")

    def world(self):
        r = self.resizes()
        return r[-1]["new_world"] if r else 1

    def output(self):
        return open(self.log.name).read()

    def trainer_nodes(self):
        found = re.findall(r"^trainer nodes:(.*)$", self.output(), re.M)
        return found[-1].split() if found else []

    def cancel(self):
        sh("job", "cancel", self.job_id(), check=False)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def emit(case, value, unit, peer=None, peer_value=None, **extra):
    rec = {"suite": "shortage", "case": case, "value": round(value, 4), "unit": unit}
    if peer is not None:
        rec.update(peer=peer, peer_value=round(peer_value, 4), ratio=round(value / peer_value, 4) if peer_value else None)
    rec["settings"] = dict(SETTINGS, **extra)
    print(json.dumps(rec), flush=True)


def first_step_after(job, since):
    wait_for(lambda: any(s.get("t", 0) >= since for s in job.steps()), "the high job's first step")
    return min(s["t"] for s in job.steps() if s.get("t", 0) >= since)


def lost_steps(job):
    rec = lines(job.out + "/metrics.jsonl", "recovery")
    return sum(r.get("steps_redone", 0) for r in rec), sum(1 for r in job.resizes() if r.get("from_checkpoint"))


jobs = []
try:
    address = sh("start", "--head", "--port", "0", "--num-cpus", "8", "--heartbeat-timeout", "2").split(" started at ")[1].split(" ")[0]
    env["YARD_ADDRESS"] = address
    nodes = [start_node(), start_node()]
    # The data, made once for every run.
    subprocess.run([train_bin, *COMMON, "--epochs", "1", "--workers", "1", "--out", work + "/warm"], env=env,
                   stdout=subprocess.DEVNULL, check=True)

    # The peer: the high job on the idle pool.
    peer = Job("peer", "2", 5, 1, "2:2")
    idle_start = first_step_after(peer, 0) - peer.t_submit
    peer.cancel()

    low = [Job("low1", "1:2", 1, 400, "1:2"), Job("low2", "1:2", 1, 400, "1:2")]
    jobs += low
    wait_for(lambda: all(j.world() == 2 for j in low), "both low jobs at 2 trainers")
    starts, freed, regrow = [], [], []
    for k in range(trials):
        before = [len(j.resizes()) for j in low]
        high = Job(f"high{k}", "2", 5, 1, "2:2")
        jobs.append(high)
        t0 = high.t_submit
        starts.append(first_step_after(high, t0) - t0)
        shrunk = []
        for j, n in zip(low, before):
            wait_for(lambda: any(r["new_world"] < r["old_world"] for r in j.resizes()[n:]), "a low job shrinking")
            shrunk.append(min(r["time"] for r in j.resizes()[n:] if r["new_world"] < r["old_world"]))
        freed.append(max(shrunk) - t0)
        high.cancel()
        t_end = time.time()
        wait_for(lambda: all(j.world() == 2 for j in low), "both low jobs back at 2 trainers")
        regrow.append(max(j.resizes()[-1]["time"] for j in low) - t_end)
        print(f"# trial {k + 1}: start {starts[-1]:.2f} s, capacity freed {freed[-1]:.2f} s, "
              f"back at 2 {regrow[-1]:.2f} s", file=sys.stderr, flush=True)
    # The same start with the same load but no preemption (a third node offers two free slots):
    # what the machine's cores, shared by every job's processes, cost the start by themselves.
    extra = start_node()
    loaded = Job("loaded", "2", 5, 1, "2:2")
    jobs.append(loaded)
    loaded_start = first_step_after(loaded, loaded.t_submit) - loaded.t_submit
    loaded.cancel()
    sh("drain", node_ids()[extra], "--timeout", "120")
    redone = sum(lost_steps(j)[0] + lost_steps(j)[1] for j in low)
    emit("high_priority_start_s", max(starts), "s", "idle_pool_start_s", idle_start, runs=[round(s, 3) for s in starts],
         loaded_pool_start_s=round(loaded_start, 3),
         note="loaded_pool_start_s: the same job with the low jobs still at full size and free slots on a third node "
              "(no preemption): the start on this machine's shared cores without any queue or preemption cost")
    emit("capacity_freed_s", max(freed), "s", runs=[round(s, 3) for s in freed])
    emit("preempted_steps_lost", redone, "steps", back_at_max_s=round(max(regrow), 3))

    # A notice on one node: the low jobs' replicas there are above MIN and leave. (The node with
    # the fewest of their trainers, so that no job has both there.)
    by_addr = node_ids()
    ids = [by_addr[n] for n in nodes]
    on = {n: [j for j in low if n in j.trainer_nodes()] for n in ids}
    second = min(ids, key=lambda n: sum(j.trainer_nodes().count(n) for j in low))
    first = [n for n in ids if n != second][0]
    hit = on[second]
    before = [len(j.resizes()) for j in hit]
    t0 = time.time()
    drain = subprocess.Popen([yard, "drain", second, "--deadline", "60"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    left = []
    for j, n in zip(hit, before):
        wait_for(lambda: any(r["new_world"] < r["old_world"] for r in j.resizes()[n:]), "a low job shrinking")
        left.append(min(r["time"] for r in j.resizes()[n:] if r["new_world"] < r["old_world"]) - t0)
    drain.wait(timeout=120)
    emit("drain_to_shrink_s", max(left), "s", runs=[round(s, 3) for s in left], how="yard drain --deadline 60",
         jobs_with_a_replica_there=len(hit))

    # A notice on the last trainer node: both jobs are at MIN with nowhere to go.
    t0 = time.time()
    deadline = t0 + 30
    drain = subprocess.Popen([yard, "drain", first, "--deadline", "30"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    committed = []
    for j in low:
        wait_for(lambda: "railway-train: stopped for the job queue" in j.output(), "a low job stopping", 60)
        committed.append(time.time())
        if "checkpoint committed" not in j.output():
            raise RuntimeError("a job stopped without its checkpoint: see " + j.log.name)
    drain.wait(timeout=120)
    start_node()
    start_node()  # room for both at MAX: neither waits behind the other's growth
    for j in low:
        wait_for(lambda: "resumed run" in j.output().split("railway-train: stopped for the job queue")[-1], "a job resuming")
    redone = sum(lost_steps(j)[0] for j in low)
    emit("spot_notice_steps_lost", redone, "steps", commit_before_deadline_s=round(deadline - max(committed), 2),
         how="yard drain --deadline 30 on the last trainer node; two new nodes join after")
finally:
    for j in jobs:
        if j.proc.poll() is None:
            j.cancel()
    subprocess.run([yard, "stop"], env=env, capture_output=True)
    if not os.environ.get("YARD_BENCH_KEEP"):
        shutil.rmtree(work, ignore_errors=True)
