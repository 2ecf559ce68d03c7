"""bench/run chaos failover [KILLS]: the replicated control store's failover, measured on its own.

A head started with --control-replicas 2 (a primary, two replicas, three Sentinels on this
machine) runs a load of placement groups, actors in them and tasks (the test probe's `churn`)
while a writer appends acknowledged writes to a ledger: SET ledger:<n>, then WAIT 1 (a write
counts as acknowledged once a replica has it). KILLS times (default 10) the primary is killed
with SIGKILL; each kill is followed until the store is whole again (two replicas online) before
the next.

Cases:
  redis_failover_s     p99 over the kills of: kill -> the first write accepted again (target <= 5 s)
  redis_failover_lost  acknowledged writes missing from the store after the last failover (target 0)
  churn_failed_rounds  rounds of the placement-group and actor load that failed (target 0)
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from cluster_bench import private_home, start_head, wait_for


class Resp:
    """A minimal RESP client: enough for AUTH, SET, WAIT, GET, ROLE and SENTINEL."""

    def __init__(self, host, port, password, timeout=1.0):
        self.s = socket.create_connection((host, port), timeout=timeout)
        self.f = self.s.makefile("rb")
        if password:
            self.cmd("AUTH", password)

    def cmd(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.s.sendall(out)
        return self.read()

    def read(self):
        line = self.f.readline()
        if not line:
            raise ConnectionError("closed")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data.decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError("bad reply " + repr(line))

    def close(self):
        self.s.close()


def primary_of(sentinels, password):
    for host, port in sentinels:
        try:
            c = Resp(host, port, password, 0.5)
            addr = c.cmd("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "yard")
            c.close()
            if addr:
                p = Resp(addr[0], int(addr[1]), password, 0.5)
                role = p.cmd("ROLE")[0]
                if role == "master":
                    return p, "%s:%s" % (addr[0], addr[1])
                p.close()
        except (OSError, RuntimeError, ConnectionError):
            pass
    return None, None


class Writer(threading.Thread):
    """Acknowledged writes, one after another, following the primary through its Sentinels. Each
    write's acceptance time is kept; a write counts as acknowledged when WAIT says a replica has
    it."""

    def __init__(self, sentinels, password):
        super().__init__(daemon=True)
        self.sentinels, self.password = sentinels, password
        self.accepted = []  # times a write was accepted
        self.acked = []  # keys a replica acknowledged
        self.stop = False

    def run(self):
        conn, n = None, 0
        while not self.stop:
            try:
                if conn is None:
                    conn, _ = primary_of(self.sentinels, self.password)
                    if conn is None:
                        time.sleep(0.05)
                        continue
                key = "ledger:%d" % n
                conn.cmd("SET", key, n)
                self.accepted.append(time.time())
                if conn.cmd("WAIT", 1, 1000) >= 1:
                    self.acked.append(key)
                n += 1
                time.sleep(0.01)
            except (OSError, RuntimeError, ConnectionError):
                conn = None
                time.sleep(0.05)


def store_status(yard, env):
    out = subprocess.run([yard, "status", "--json"], env=env, capture_output=True, text=True, timeout=30)
    return json.loads(out.stdout)["cluster"].get("control_store", {})


def whole(yard, env):
    cs = store_status(yard, env)
    return cs.get("quorum") and sum(r.get("state") == "online" for r in cs.get("replicas", [])) == 2


def pid_listening(port):
    out = subprocess.run(["ss", "-ltnpH", "sport = :%d" % port], capture_output=True, text=True).stdout
    for part in out.split("pid=")[1:]:
        return int(part.split(",")[0])
    return None


def main():
    yard, probe = sys.argv[1], sys.argv[2]
    kills = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    home, env = private_home("yard-chaos-")
    churn = None
    try:
        start_head(yard, env, "--control-replicas", "2")
        session = [d for d in os.listdir(home) if d.startswith("session-")][0]
        sdir = os.path.join(home, session)
        address = open(os.path.join(sdir, "redis.address")).read().split()[0]
        password = open(os.path.join(sdir, "redis", "password")).read().strip()
        sentinels = [(h, int(p)) for h, p in (s.rsplit(":", 1) for s in address[len("sentinel:"):].split("/")[0].split(","))]
        status = subprocess.run([yard, "status"], env=env, capture_output=True, text=True).stdout
        cluster = status.split()[1]
        stop_file = os.path.join(home, "churn.stop")
        churn_out = open(os.path.join(home, "churn.out"), "w")
        churn = subprocess.Popen([probe, "churn", stop_file], env=dict(env, YARD_ADDRESS=cluster), stdout=churn_out,
                                 stderr=subprocess.STDOUT)
        writer = Writer(sentinels, password)
        writer.start()
        wait_for(lambda: len(writer.accepted) > 20, "the ledger's first writes", 60)
        times = []
        for k in range(kills):
            wait_for(lambda: whole(yard, env), "the store to be whole again", 120)
            primary = store_status(yard, env)["primary"]
            pid = pid_listening(int(primary.rsplit(":", 1)[1]))
            before = len(writer.accepted)
            t0 = time.time()
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: any(t > t0 for t in writer.accepted[before:]), "a write accepted after the kill", 60)
            times.append(min(t for t in writer.accepted[before:] if t > t0) - t0)
            print("kill %d: %.2f s" % (k + 1, times[-1]), file=sys.stderr)
        wait_for(lambda: whole(yard, env), "the store to be whole again", 120)
        writer.stop = True
        writer.join(5)
        conn, _ = primary_of(sentinels, password)
        lost = sum(conn.cmd("GET", key) is None for key in writer.acked)
        open(stop_file, "w").write("stop\n")
        churn.wait(120)
        churn_out.close()
        text = open(os.path.join(home, "churn.out")).read()
        failed = text.count("failed ") - 1 if "done " in text else -1
        times.sort()
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        for case, value, unit in [("redis_failover_s", round(p99, 2), "s"), ("redis_failover_lost", lost, "writes"),
                                  ("churn_failed_rounds", failed, "rounds")]:
            print(json.dumps({"suite": "chaos", "case": case, "value": value, "unit": unit}))
        print("%d acknowledged writes checked; kill -> write accepted: %s s" %
              (len(writer.acked), ", ".join("%.2f" % t for t in times)), file=sys.stderr)
    finally:
        if churn and churn.poll() is None:
            churn.kill()
        subprocess.run([yard, "stop"], env=env, capture_output=True, timeout=120)
        subprocess.run(["rm", "-rf", home])


if __name__ == "__main__":
    main()
