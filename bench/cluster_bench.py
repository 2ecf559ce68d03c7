"""What the Python cluster benches (shortage, hetero, fair share, preempt) share: waiting on a
condition with a deadline, and a job's JSON-lines files read back."""
import json
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
