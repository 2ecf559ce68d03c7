#!/usr/bin/python3
"""bench/run shortage fair: the job queue's fair sharing between teams, with the real head and its
queue. A head of 8 CPU slots; three teams with weights 1:1:2 keep one-replica jobs (CPU=1 each,
a program that holds its slot for 4 s) queued, each with a backlog of at least 12, so that every
team is saturated for the whole run.

Usage: fair_share_bench.py YARD [SECONDS]   (SECONDS default 150)
Cases:
  fair_share_error  every 10 s, the last 60 s's share of each team in the slot-seconds its jobs'
                    programs ran, against its weighted share (1/4, 1/4, 1/2); value: the largest
                    deviation over the windows that end after the first 60 s (the queue's usage
                    counts start at zero). Target <= 0.05. Settings: each team's share over the
                    measured time, and the admissions per second.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

yard = os.path.abspath(sys.argv[1])
seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 150
work = tempfile.mkdtemp(prefix="yard-fair-bench-")
env = dict(os.environ, YARD_HOME=work + "/home")
os.makedirs(env["YARD_HOME"])
SLOTS, HOLD_S, BACKLOG, WINDOW_S = 8, 4, 12, 60
TEAMS = {"a": 1, "b": 1, "c": 2}
LOG = work + "/runs.log"
CONFIG = "[queue]\nstarvation_s = 100000\n\n" + "".join(
    f"[teams.{t}]\nweight = {w}\nmax_queued = 1000\n\n" for t, w in TEAMS.items())


def sh(*args, check=True):
    return subprocess.run([yard, *args], env=env, capture_output=True, text=True, check=check).stdout


def runs():
    """(team, start, end) of every job program that ended; and the starts per team so far."""
    starts, done = {}, []
    try:
        lines = open(LOG).read().split("\n")
    except FileNotFoundError:
        return [], {}
    for line in lines:
        m = re.match(r"(\w+) (\d+) (start|end) ([\d.]+)$", line)
        if not m:
            continue
        key = (m.group(1), m.group(2))
        if m.group(3) == "start":
            starts[key] = float(m.group(4))
        elif key in starts:
            done.append((m.group(1), starts[key], float(m.group(4))))
    per_team = {t: sum(1 for (team, _) in starts if team == t) for t in TEAMS}
    return done, per_team


def submit(team, n, credential):
    program = (f'echo "{team} {n} start $(date +%s.%N)" >> {LOG}; sleep {HOLD_S}; '
               f'echo "{team} {n} end $(date +%s.%N)" >> {LOG}')
    subprocess.run([yard, "submit", "--no-wait", "--team", team, "--team-credential", credential, "--replicas", "1",
                    "--replica", "CPU=1", "--", "sh", "-c", program], env=env, capture_output=True, check=True)


def shares(done, since, until):
    held = {t: 0.0 for t in TEAMS}
    for team, a, b in done:
        held[team] += max(0.0, min(b, until) - max(a, since))
    total = sum(held.values())
    return {t: held[t] / total for t in TEAMS} if total else None


try:
    with open(work + "/cluster.toml", "w") as f:
        f.write(CONFIG)
    out = sh("start", "--head", "--port", "0", "--num-cpus", str(SLOTS), "--config", work + "/cluster.toml")
    env["YARD_ADDRESS"] = re.search(r"started at (\S+)", out).group(1).rstrip(",")
    credentials = {t: sh("team-credential", t).strip() for t in TEAMS}
    submitted = {t: 0 for t in TEAMS}
    t0 = time.time()
    while time.time() - t0 < seconds:
        _, started = runs()
        for t in TEAMS:
            while submitted[t] - started.get(t, 0) < BACKLOG:
                submit(t, submitted[t], credentials[t])
                submitted[t] += 1
        time.sleep(0.2)
    t_end = time.time()
    done, _ = runs()
    total_w = sum(TEAMS.values())
    want = {t: w / total_w for t, w in TEAMS.items()}
    worst, windows = 0.0, 0
    for end in range(int(t0) + WINDOW_S, int(t_end) + 1, 10):
        # Jobs that started before the window's end and had ended by t_end: a window is counted
        # only when every job running in it has ended.
        if end > t_end - HOLD_S - 1:
            break
        s = shares(done, end - WINDOW_S, end)
        if s:
            windows += 1
            worst = max(worst, max(abs(s[t] - want[t]) for t in TEAMS))
    overall = shares(done, t0 + WINDOW_S, t_end - HOLD_S - 1)
    admitted = sum(1 for _, a, _ in done if a >= t0 + WINDOW_S)
    print(json.dumps({"suite": "shortage", "case": "fair_share_error", "value": round(worst, 4), "unit": "fraction",
                      "settings": {"pool": f"a head of {SLOTS} CPU slots", "teams": "a, b, c with weights 1:1:2",
                                   "jobs": f"one replica of CPU=1, its program holds it {HOLD_S} s",
                                   "backlog": f">= {BACKLOG} queued per team", "seconds": seconds,
                                   "windows": f"{windows} windows of {WINDOW_S} s every 10 s after the first {WINDOW_S} s",
                                   "usage_half_life_s": 3600,
                                   "shares": {t: round(v, 4) for t, v in (overall or {}).items()},
                                   "admissions_per_s": round(admitted / max(1e-9, t_end - HOLD_S - 1 - t0 - WINDOW_S), 2)}}),
          flush=True)
finally:
    subprocess.run([yard, "stop"], env=env, capture_output=True)
    if not os.environ.get("YARD_BENCH_KEEP"):
        shutil.rmtree(work, ignore_errors=True)
