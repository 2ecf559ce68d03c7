#!/usr/bin/env python3
"""bench/run faults: kill -9 of a random worker of the railway job at a uniformly random moment.

The job (4 epochs, one 8 km log recorded and aligned afresh every run, 2 trainers, a checkpoint
every 20 steps) is first run undisturbed (twice: its wall time is the median). Then, KILLS times,
a fresh run is started, a moment is drawn uniformly over the undisturbed run's length, and at that
moment one of the job's worker processes (an aligner, a trainer, the checkpointer: the children of
the job's node manager) is drawn and killed with SIGKILL. Reported:
  fault_completion_rate   runs that finished with status 0 (target 1.0)
  fault_val_loss_rel_max  largest |final val loss - undisturbed| / undisturbed (target <= 1e-3)
  fault_time_lost_s_median  wall time added per fault, against one checkpoint interval + 5 s
Then, EARLY times, the same with the moment drawn over the job's first 10 s (while its aligners
and trainers are being constructed and start):
  early_kill_completion   runs that finished with status 0 (target 1.0)
Every run has its own YARD_HOME; a run that fails keeps its output, its metrics and the logs of
its embedded cluster (every worker's) under the directory the last line names.
Usage: fault_campaign.py RAILWAY_TRAIN [KILLS] [SEED] [EARLY]
"""
import json, os, random, re, shutil, signal, statistics, subprocess, sys, tempfile, time

JOB = ["--epochs", "4", "--workers", "2", "--logs", "1", "--length-km", "8", "--batch", "16",
       "--checkpoint-every", "20", "--balance", "1"]


def children(pid):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            out.append(int(p))
    return out


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def job_workers(driver, log_path):
    """The job's working processes: children of its node manager (a `yard start ... --head-node`)
    that the job's progress names (aligners, trainers, the checkpointer); idle pool workers are
    not drawn, their loss costs nothing."""
    workers = []
    for head in children(driver):
        for node in children(head):
            if b"--head-node" in cmdline(node):
                workers += [w for w in children(node) if b"railway-train" in (cmdline(w) or [b""])[0]]
    named = set(int(x) for x in re.findall(r"pid[s]?((?: \d+)+)", open(log_path).read()) for x in x.split())
    return [w for w in workers if w in named]


def final(out):
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    epochs = [j for j in lines if j.get("event") == "epoch"]
    return epochs[-1] if epochs else None, [j for j in lines if j.get("event") == "recovery"]


def run(binary, work, name, kill_at=None, rng=None):
    data, out = os.path.join(work, "data-" + name), os.path.join(work, "out-" + name)
    log_path = os.path.join(work, name + ".log")
    log = open(log_path, "w")
    t0 = time.monotonic()
    env = dict(os.environ, YARD_HOME=os.path.join(work, "home-" + name))
    p = subprocess.Popen([binary] + JOB + ["--data", data, "--out", out], stdout=log, stderr=subprocess.STDOUT,
                         cwd=work, env=env)
    victim, role = None, None
    if kill_at is not None:
        while p.poll() is None and time.monotonic() - t0 < kill_at:
            time.sleep(0.02)
        while p.poll() is None and victim is None:
            ws = job_workers(p.pid, log_path)
            if ws:
                victim = rng.choice(ws)
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    victim = None
                    continue
                named = [l for l in open(log_path) if re.search(r"\b%d\b" % victim, l)]
                role = ("checkpointer" if "checkpointer" in named[-1] else "aligner" if "aligner" in named[-1]
                        else "trainer") if named else "?"
            else:
                time.sleep(0.02)
    try:
        rc = p.wait(timeout=900)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = -9
    wall = time.monotonic() - t0
    shutil.rmtree(data, ignore_errors=True)
    ep, rec = final(out) if rc == 0 else (None, [])
    if rc == 0 and ep:
        shutil.rmtree(os.path.join(work, "home-" + name), ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    return rc, wall, ep, rec, (victim, role)


def keep_failed(work, name, kept):
    """Moves a failed run's job output, metrics and its cluster's logs under `kept`/`name`."""
    dest = os.path.join(kept, name)
    os.makedirs(dest, exist_ok=True)
    for part, to in ((name + ".log", "job.log"), ("out-" + name, "out"), (os.path.join("home-" + name, "logs"), "logs")):
        src = os.path.join(work, part)
        if os.path.exists(src):
            shutil.move(src, os.path.join(dest, to))
    return dest


def campaign(binary, work, kept, prefix, runs, window_s, rng, t_clean, loss):
    """`runs` runs, each with one kill at a moment drawn uniformly over [0, window_s)."""
    done, rel, lost, phases, roles, failed = 0, [], [], {}, {}, []
    for i in range(runs):
        at = rng.uniform(0, window_s)
        name = "%s%d" % (prefix, i)
        rc, wall, ep, rec, victim = run(binary, work, name, at, rng)
        phase = rec[0]["phase"] if rec else "none reported"
        phases[phase] = phases.get(phase, 0) + 1
        roles[victim[1]] = roles.get(victim[1], 0) + 1
        print("# %s kill %d at %.1f s (%s, pid %s): status %d, %.1f s, %s" % (prefix, i + 1, at, victim[1], victim[0],
                                                                             rc, wall, phase), file=sys.stderr, flush=True)
        if rc == 0 and ep:
            done += 1
            rel.append(abs(ep["val_loss"] - loss) / loss)
            lost.append(wall - t_clean)
        else:
            failed.append(keep_failed(work, name, kept))
            print("#   kept: " + failed[-1], file=sys.stderr, flush=True)
    return done, rel, lost, phases, roles, failed


def emit(case, value, unit, peer=None, peer_value=None, **extra):
    r = {"suite": "faults", "case": case, "value": value, "unit": unit}
    if peer is not None:
        r.update(peer=peer, peer_value=peer_value, ratio=value / peer_value if peer_value else None,
                 settings="the peer is measured in the same run: one checkpoint interval of the undisturbed job + 5 s")
    r.update(extra)
    print(json.dumps(r), flush=True)


def main():
    binary = os.path.abspath(sys.argv[1])
    kills = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    early = int(sys.argv[4]) if len(sys.argv) > 4 else 50
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix="yard-faults-")
    kept = tempfile.mkdtemp(prefix="yard-faults-failed-")
    try:
        clean = [run(binary, work, "clean%d" % i) for i in range(2)]
        if any(c[0] != 0 for c in clean):
            sys.exit("the undisturbed job failed: see " + keep_failed(work, "clean0", kept))
        t_clean = statistics.median(c[1] for c in clean)
        loss = clean[0][2]["val_loss"]
        interval_s = clean[0][2]["step_ms"] * 20 / 1000
        failed = []
        if kills:
            done, rel, lost, phases, roles, f = campaign(binary, work, kept, "fault", kills, t_clean, rng, t_clean, loss)
            failed += f
            emit("fault_completion_rate", done / kills, "fraction", kills=kills, seed=seed, victims=roles, phases=phases)
            emit("fault_val_loss_rel_max", max(rel) if rel else float("nan"), "fraction")
            emit("fault_time_lost_s_median", statistics.median(lost) if lost else float("nan"), "s",
                 "checkpoint_interval_plus_5s", interval_s + 5, undisturbed_s=round(t_clean, 2))
        if early:
            done, rel, lost, phases, roles, f = campaign(binary, work, kept, "early", early, min(10.0, t_clean), rng,
                                                         t_clean, loss)
            failed += f
            emit("early_kill_completion", done / early, "fraction", runs=early, seed=seed, victims=roles, phases=phases,
                 val_loss_rel_max=max(rel) if rel else None, failed_runs_kept=f)
        print("# failed runs kept in %s (%d)" % (kept, len(failed)) if failed else "# no run failed", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not os.listdir(kept):
            os.rmdir(kept)


if __name__ == "__main__":
    main()
