"""bench/run chaos head [KILLS]: a standby head's takeover, measured on its own.

A head (default lease, 6 s, unless YARD_HEAD_LEASE_MS says otherwise) and a standby beside it run a
driver that creates and removes placement groups one after another (the test probe's
`placements`), started with the first head's address only: it follows the active head through its
node manager. KILLS times (default 10) the active head is killed with SIGKILL; each time, the kill
-> the first placement group placed after it is timed, the standby is checked to have taken the
epoch over, and a new standby is started beside the new head before the next kill.

Cases:
  head_failover_s          p99 over the kills of: kill -> a placement group placed again (target <= 10 s)
  head_failover_failed_pg  placement requests the driver saw fail over the whole run (during outages)
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

from chaos_bench import pid_listening
from cluster_bench import private_home, start_head, wait_for


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def active(yard, env, heads):
    """(epoch, address, standbys) of the head that answers at the list `heads`, or None."""
    out = subprocess.run([yard, "status", "--json"], env=dict(env, YARD_ADDRESS=",".join(heads)),
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        return None
    try:
        cl = json.loads(out.stdout)["cluster"]
    except (ValueError, KeyError):
        return None
    return cl.get("head_epoch", 0), cl.get("address", ""), cl.get("standby_heads", [])


def start_standby(yard, env, head):
    port = free_port()
    out = subprocess.run([yard, "start", "--head", "--standby", "--address", head, "--port", str(port)], env=env,
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError("yard start --standby: " + out.stdout + out.stderr)
    return "127.0.0.1:%d" % port


def placed_times(path):
    with open(path) as f:
        return [int(l.split()[1]) / 1000.0 for l in f if l.startswith("placed ")]


def main():
    yard, probe = sys.argv[1], sys.argv[2]
    kills = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    home, env = private_home("yard-heads-")
    driver, heads = None, []
    try:
        start_head(yard, env)
        first = subprocess.run([yard, "status"], env=env, capture_output=True, text=True).stdout.split()[1]
        heads = [first, start_standby(yard, env, first)]
        stop_file, out_path = os.path.join(home, "placements.stop"), os.path.join(home, "placements.out")
        with open(out_path, "w") as out_file:
            driver = subprocess.Popen([probe, "placements", stop_file], env=dict(env, YARD_ADDRESS=first),
                                      stdout=out_file, stderr=subprocess.STDOUT)
        wait_for(lambda: len(placed_times(out_path)) > 20, "the driver's first placements", 60)
        times = []
        for k in range(kills):
            state = None

            def ready():
                nonlocal state
                state = active(yard, env, heads)
                return state is not None and len(state[2]) >= 1

            wait_for(ready, "an active head with a standby", 120)
            epoch, leader = state[0], state[1]
            pid = pid_listening(int(leader.rsplit(":", 1)[1]))
            t0 = time.time()
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: any(t > t0 for t in placed_times(out_path)), "a placement after the kill", 120)
            times.append(min(t for t in placed_times(out_path) if t > t0) - t0)
            wait_for(lambda: (active(yard, env, heads) or (0,))[0] > epoch, "the standby's epoch", 60)
            now = active(yard, env, heads)
            heads.remove(leader)
            heads.append(start_standby(yard, env, now[1]))
            print("kill %d: %.2f s (epoch %d -> %d)" % (k + 1, times[-1], epoch, now[0]), file=sys.stderr)
        open(stop_file, "w").write("stop\n")
        driver.wait(120)
        text = open(out_path).read()
        failed = sum(l.startswith("failed ") for l in text.splitlines())
        times.sort()
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        lease = os.environ.get("YARD_HEAD_LEASE_MS", "6000 (default)")
        for case, value, unit in [("head_failover_s", round(p99, 2), "s"), ("head_failover_failed_pg", failed, "requests")]:
            print(json.dumps({"suite": "chaos", "case": case, "value": value, "unit": unit,
                              "settings": "head lease %s ms, %d kills" % (lease, kills)}))
        print("kill -> placement group placed: %s s" % ", ".join("%.2f" % t for t in times), file=sys.stderr)
    finally:
        if driver and driver.poll() is None:
            driver.kill()
        if heads:
            subprocess.run([yard, "stop"], env=dict(env, YARD_ADDRESS=",".join(heads)), capture_output=True,
                           timeout=120)
        subprocess.run(["rm", "-rf", home])


if __name__ == "__main__":
    main()
