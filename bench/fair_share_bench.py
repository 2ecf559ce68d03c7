#!/usr/bin/python3
"""bench/run shortage fair: the job queue's fair sharing between teams, with the real head and its
queue. A head of 8 CPU slots; three teams with weights 1:1:2 keep one-replica jobs (CPU=1 each,
a program that holds its slot for 4 s) queued, each with a backlog of at least 12, so that every
team is saturated for the whole run.

Then, on a head of its own, a team that was idle returns: teams a and b (no guarantee) fill the
8 slots with jobs that hold them 60 s while team c (guarantee CPU=4) has nothing queued; then c
submits 4 one-slot jobs at once.

Usage: fair_share_bench.py YARD [SECONDS]   (SECONDS default 150; 0: only the returning team)
Cases:
  fair_share_error      every 10 s, the last 60 s's share of each team in the slot-seconds its jobs'
                        programs ran, against its weighted share (1/4, 1/4, 1/2); value: the largest
                        deviation over the windows that end after the first 60 s (the queue's usage
                        counts start at zero). Target <= 0.05. Settings: each team's share over the
                        measured time, and the admissions per second.
  idle_team_reclaim_s   c's submission -> all 4 of its programs running: its guarantee taken back
                        from the borrowers (each stopped at MIN: its program, which cannot hear a
                        request to stop, gets SIGTERM after stop_grace_s = 1, the least allowed,
                        and is requeued). Settings: how many borrowers were stopped.
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


def started_since(team, since):
    try:
        lines = open(LOG).read().split("\n")
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        m = re.match(r"(\w+) (\d+) start ([\d.]+)$", line)
        if m and m.group(1) == team and float(m.group(3)) >= since:
            out.append(float(m.group(3)))
    return out


def start_head(config):
    with open(work + "/cluster.toml", "w") as f:
        f.write(config)
    out = sh("start", "--head", "--port", "0", "--num-cpus", str(SLOTS), "--config", work + "/cluster.toml")
    env["YARD_ADDRESS"] = re.search(r"started at (\S+)", out).group(1).rstrip(",")
    return {t: sh("team-credential", t).strip() for t in TEAMS}


def reclaim():
    """A returning idle team's guarantee taken back (idle_team_reclaim_s)."""
    global HOLD_S
    config = ("[queue]\nstarvation_s = 100000\nstop_grace_s = 1\n\n[teams.a]\nweight = 1\nmax_queued = 1000\n\n"
              "[teams.b]\nweight = 1\nmax_queued = 1000\n\n[teams.c]\nweight = 2\nmax_queued = 1000\n"
              "guarantee = { CPU = 4 }\n")
    credentials = start_head(config)
    HOLD_S = 60
    n = 0
    for i in range(SLOTS + 4):  # more than the pool holds: a and b borrow c's idle guarantee
        submit("a" if i % 2 == 0 else "b", 1000 + i, credentials["a" if i % 2 == 0 else "b"])
    deadline = time.time() + 60
    while time.time() < deadline and len(started_since("a", 0)) + len(started_since("b", 0)) < SLOTS:
        time.sleep(0.1)
    borrowers = len(started_since("a", 0)) + len(started_since("b", 0))
    t_submit = time.time()
    for i in range(4):
        submit("c", 2000 + i, credentials["c"])
    deadline = time.time() + 60
    while time.time() < deadline and len(started_since("c", 0)) < 4:
        time.sleep(0.05)
    starts = started_since("c", 0)
    reclaimed = max(starts) - t_submit if len(starts) == 4 else None
    stopped = len(started_since("a", t_submit)) + len(started_since("b", t_submit))  # requeued and run again
    print(json.dumps({"suite": "shortage", "case": "idle_team_reclaim_s",
                      "value": round(reclaimed, 3) if reclaimed is not None else None, "unit": "s",
                      "settings": {"pool": f"a head of {SLOTS} CPU slots", "borrowers_running": borrowers,
                                   "teams": "a, b (no guarantee) fill the pool; c (guarantee CPU=4) returns with 4 one-slot jobs",
                                   "stop_grace_s": 1, "c_programs_started": len(starts),
                                   "submission": "4 `yard submit --no-wait` one after the other, from the first",
                                   "borrowers_started_again_after": stopped}}), flush=True)


def shares(done, since, until):
    held = {t: 0.0 for t in TEAMS}
    for team, a, b in done:
        held[team] += max(0.0, min(b, until) - max(a, since))
    total = sum(held.values())
    return {t: held[t] / total for t in TEAMS} if total else None


def fair():
    credentials = start_head(CONFIG)
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


try:
    if seconds > 0:
        fair()
        subprocess.run([yard, "stop"], env=env, capture_output=True)
        os.rename(LOG, LOG + ".fair")
    reclaim()
finally:
    subprocess.run([yard, "stop"], env=env, capture_output=True)
    if not os.environ.get("YARD_BENCH_KEEP"):
        shutil.rmtree(work, ignore_errors=True)
