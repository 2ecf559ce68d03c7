#!/usr/bin/python3
"""bench/run shortage hetero: batch shares by speed on nodes of two speeds, with real railway-train
jobs on a real cluster (a head and two one-trainer nodes, each a `yard start`). Each trainer node
runs in a cgroup (v1 `cpu`) of its own; the slow one's processes get half a core
(`cpu.cfs_quota_us` 5000 of a 10000 us period), the other's are not limited. Half-way through the
job the quotas swap.

Usage: hetero_bench.py YARD RAILWAY_TRAIN
Cases:
  hetero_step_time_vs_ideal  an elastic job of two trainers (--workers 2:2, --batch-shares speed).
                             Per step: the step's time (the longest of each trainer's busy plus
                             waiting time) over the ideal: the global batch over the trainers'
                             summed measured throughput (samples over busy seconds), plus the
                             all-reduce (the shortest wait: the last trainer to arrive waits only
                             for it). Value: the median over the steps from the 10th after the
                             start and from the 10th after the swap. Peer: the same job with
                             --batch-shares equal, the same nodes and swap. Target <= 1.05.
                             Settings: each phase's median, and the steps until the ratio is first
                             within 1.05 after the start and after the swap.
                             equal_nodes_ratio: the same measure on two equal nodes with equal
                             shares (nothing to balance): the machine's floor for it.
  hetero_val_loss_rel        the speed-shared run's final validation loss against the same job on
                             equal nodes with equal shares: |hetero - equal| / equal. Target <= 0.01.
Needs root and the cgroup v1 cpu controller (/sys/fs/cgroup/cpu); without them it says so and
prints no case.
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from cluster_bench import lines

yard, train_bin = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
CGROUP = "/sys/fs/cgroup/cpu"
PERIOD_US, SLOW_QUOTA_US = 10000, 5000
STEPS_PER_PHASE = 60
work = tempfile.mkdtemp(prefix="yard-hetero-bench-")
env = dict(os.environ, YARD_HOME=work + "/home", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
os.makedirs(env["YARD_HOME"])
COMMON = ["--logs", "2", "--length-km", "8", "--batch", "64", "--seed", "5", "--checkpoint-every", "1000",
          "--workers", "2:2", "--trainer-resources", '{"CPU": 1, "trainer": 1}', "--data", work + "/data"]
SETTINGS = {"nodes": "2 one-trainer nodes in cgroups of their own; the slow one's quota half a core "
                     f"({SLOW_QUOTA_US} of {PERIOD_US} us), swapped half-way",
            "blas_threads": 1, "data": "2 logs of 8 km", "batch": "64 per trainer, global 128",
            "workers": "2:2 (elastic)"}


def sh(*args, check=True):
    return subprocess.run([yard, *args], env=env, capture_output=True, text=True, check=check).stdout


def cgroup(name):
    return f"{CGROUP}/yard-hetero-{os.getpid()}-{name}"


def set_quota(name, quota_us):
    with open(cgroup(name) + "/cpu.cfs_quota_us", "w") as f:
        f.write(str(quota_us))


def start_node_in(name):
    """A one-trainer node whose processes (the node manager and the workers it starts) live in cgroup NAME."""
    os.makedirs(cgroup(name), exist_ok=True)
    with open(cgroup(name) + "/cpu.cfs_period_us", "w") as f:
        f.write(str(PERIOD_US))
    set_quota(name, -1)
    script = f'echo $$ > {cgroup(name)}/cgroup.procs && exec "$@"'
    subprocess.run(["sh", "-c", script, "sh", yard, "start", "--address", address, "--num-cpus", "1", "--resources",
                    '{"trainer": 1}', "--heartbeat-timeout", "2"], env=env, capture_output=True, text=True, check=True)


def steps_of(out):
    return lines(out + "/steps.jsonl")


def run(name, shares, slow, epochs):
    """Runs the job; slow: which node ("a" or "b") starts at half a core (None: both full), swapped
    once the job has trained STEPS_PER_PHASE steps. Returns (steps, the global step of the swap,
    the final validation loss)."""
    set_quota("a", SLOW_QUOTA_US if slow == "a" else -1)
    set_quota("b", SLOW_QUOTA_US if slow == "b" else -1)
    out = f"{work}/{name}"
    log = open(out + ".log", "w")
    proc = subprocess.Popen([yard, "submit", "--", train_bin, *COMMON, "--epochs", str(epochs), "--batch-shares", shares,
                             "--out", out], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work)
    swapped_at = None
    while proc.poll() is None:
        s = steps_of(out)
        if slow and swapped_at is None and s and s[-1]["step"] >= STEPS_PER_PHASE:
            other = "b" if slow == "a" else "a"
            set_quota(other, SLOW_QUOTA_US)
            set_quota(slow, -1)
            swapped_at = s[-1]["step"]
        time.sleep(0.02)
    if proc.returncode != 0:
        raise RuntimeError(f"the {name} job failed: see {log.name}")
    val = [json.loads(l) for l in open(out + "/metrics.jsonl") if '"val_loss"' in l]
    return steps_of(out), swapped_at, val[-1]["val_loss"]


def ratio(step):
    """The step's time over the ideal: global batch / summed throughput + the all-reduce."""
    busy, wait, shares = step["busy_s"], step["wait_s"], step["shares"]
    took = max(b + w for b, w in zip(busy, wait))
    ideal = sum(shares) / sum(s / b for s, b in zip(shares, busy)) + min(wait)
    return took / ideal


def phases(steps, swapped_at):
    full = [s for s in steps if len(s.get("shares", [])) == 2 and all(b > 0 for b in s["busy_s"])]
    first = [ratio(s) for s in full if s["step"] <= swapped_at]
    second = [ratio(s) for s in full if s["step"] > swapped_at]
    settle = lambda rs: next((k for k, r in enumerate(rs) if r <= 1.05), None)
    return first, second, settle(first), settle(second)


def steps_per_epoch(log):
    return int(re.search(r"(\d+) steps per epoch", open(log).read()).group(1))


if os.geteuid() != 0 or not os.path.isdir(CGROUP):
    print(f"hetero: skipped: needs root and the cgroup v1 cpu controller at {CGROUP}", file=sys.stderr)
    sys.exit(0)
try:
    address = re.search(r"started at (\S+)", sh("start", "--head", "--port", "0", "--num-cpus", "2",
                                              "--heartbeat-timeout", "2")).group(1).rstrip(",")
    env["YARD_ADDRESS"] = address
    env["YARD_TOKEN"] = open(next(f"{env['YARD_HOME']}/{d}/token" for d in os.listdir(env["YARD_HOME"])
                                  if d.startswith("session-"))).read().strip()
    start_node_in("a")
    start_node_in("b")
    # A short run on equal nodes makes the data and tells the steps an epoch has.
    run("warm", "equal", None, 1)
    epochs = max(2, -(-2 * (STEPS_PER_PHASE + 10) // steps_per_epoch(f"{work}/warm.log")))
    SETTINGS["epochs"] = epochs
    speed_steps, speed_swap, speed_val = run("speed", "speed", "b", epochs)
    equal_steps, equal_swap, equal_val = run("equal", "equal", "b", epochs)
    reference_steps, _, reference_val = run("reference", "equal", None, epochs)
    s1, s2, settle1, settle2 = phases(speed_steps, speed_swap)
    e1, e2, _, _ = phases(equal_steps, equal_swap)
    value = statistics.median(s1[10:] + s2[10:])
    # The same measure on two equal nodes with equal shares, where there is nothing to balance: how
    # close to the ideal lock-step training gets on this machine at all.
    floor = statistics.median(ratio(s) for s in reference_steps[10:] if len(s.get("shares", [])) == 2)
    peer = statistics.median(e1[10:] + e2[10:])
    slow_share = statistics.median(min(s["shares"]) / sum(s["shares"]) for s in speed_steps[10:STEPS_PER_PHASE])
    print(json.dumps({"suite": "shortage", "case": "hetero_step_time_vs_ideal", "value": round(value, 4), "unit": "ratio",
                      "peer": "equal shares, same nodes and swap", "peer_value": round(peer, 4),
                      "ratio": round(value / peer, 4),
                      "settings": dict(SETTINGS, before_swap=round(statistics.median(s1[10:]), 4),
                                       after_swap=round(statistics.median(s2[10:]), 4),
                                       steps_to_1_05=settle1, steps_to_1_05_after_swap=settle2,
                                       slow_share_before_swap=round(slow_share, 3),
                                       swap_at_step=speed_swap, equal_nodes_ratio=round(floor, 4))}), flush=True)
    rel = abs(speed_val - reference_val) / reference_val
    print(json.dumps({"suite": "shortage", "case": "hetero_val_loss_rel", "value": round(rel, 5), "unit": "fraction",
                      "settings": dict(SETTINGS, speed_val_loss=round(speed_val, 5),
                                       equal_nodes_val_loss=round(reference_val, 5),
                                       equal_shares_hetero_val_loss=round(equal_val, 5))}), flush=True)
finally:
    subprocess.run([yard, "stop"], env=env, capture_output=True)
    for name in ("a", "b"):
        if os.path.isdir(cgroup(name)):
            # Whatever is left in it goes back to the root group first.
            for pid in open(cgroup(name) + "/cgroup.procs").read().split():
                try:
                    with open(CGROUP + "/cgroup.procs", "w") as f:
                        f.write(pid)
                except OSError:
                    pass
            try:
                os.rmdir(cgroup(name))
            except OSError as e:
                print(f"hetero: could not remove {cgroup(name)}: {e}", file=sys.stderr)
    if not os.environ.get("YARD_BENCH_KEEP"):
        shutil.rmtree(work, ignore_errors=True)
