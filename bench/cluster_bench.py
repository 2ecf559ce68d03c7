"""What the Python cluster benches (shortage, hetero, fair share, preempt, chaos) share: waiting on
a condition with a deadline, a job's JSON-lines files read back, and a head of the bench's own."""
import json
import os
import subprocess
import tempfile
import time


def wait_for(cond, what, timeout=600):
    """Polls cond every 50 ms until it holds; RuntimeError naming `what` after `timeout` s."""
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return
        time.sleep(0.05)
    raise RuntimeError("timed out waiting for " + what)


def lines(path, event=None):
    """A JSON-lines file's records (those of `event` when given); [] while it is missing or being
    written."""
    try:
        with open(path) as f:
            out = [json.loads(l) for l in f if l.strip()]
    except (FileNotFoundError, json.JSONDecodeError):
        return []
    return [j for j in out if event is None or j.get("event") == event]


def private_home(prefix):
    """A YARD_HOME of the bench's own, and an environment that uses it (without YARD_ADDRESS)."""
    home = tempfile.mkdtemp(prefix=prefix)
    env = dict(os.environ, YARD_HOME=home)
    env.pop("YARD_ADDRESS", None)
    return home, env


def start_head(yard, env, *extra):
    """`yard start --head` on a free port with 2 CPUs (and `extra`); RuntimeError with its output."""
    out = subprocess.run([yard, "start", "--head", "--port", "0", "--num-cpus", "2", *extra], env=env,
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError("yard start: " + out.stdout + out.stderr)
