#!/usr/bin/env bash
# Prometheus scrapes a head and two nodes started with --metrics-port, finding them through
# `yard metrics-targets` (file-based service discovery) and authenticating with the cluster
# token; queries through its HTTP API return what the test did: the nodes and their CPUs, a
# detached actor, leased workers for tasks, finished jobs. An unauthenticated scrape gets 401.
# Needs Debian's prometheus package: skipped (exit 77) with a message without it.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
YARD=$1
PROBE=$2
PROMETHEUS=$(command -v prometheus || true)
if [ -z "$PROMETHEUS" ]; then
  echo "SKIP: this test needs the prometheus server (Debian package prometheus; scripts/setup-deps installs it)"
  exit 77
fi
export YARD_HOME=$(mktemp -d /tmp/yard-metrics-XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
PROM_PORT=$(free_port)
PROM_PID=
PROBE_PID=
cleanup() {
  set +e
  [ -n "$PROM_PID" ] && kill -9 "$PROM_PID" 2>/dev/null
  [ -n "$PROBE_PID" ] && kill -9 "$PROBE_PID" 2>/dev/null
  for p in $(daemon_pids) $(redis_pids); do kill -9 "$p" 2>/dev/null; done
  rm -rf "$YARD_HOME"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$YARD_HOME/prometheus.log" ] && tail -20 "$YARD_HOME/prometheus.log"; exit 1; }

"$YARD" start --head --port "$PORT" --num-cpus 2 --metrics-port 0 > /dev/null
TOKEN_FILE=$(ls "$YARD_HOME"/session-*/token)
TOKEN=$(cat "$TOKEN_FILE")
KEY_FILE=$(ls "$YARD_HOME"/session-*/web_key)
"$YARD" start --address "127.0.0.1:$PORT" --token "$TOKEN" --port 0 --num-cpus 1 --metrics-port 0 > /dev/null
export YARD_ADDRESS=127.0.0.1:$PORT YARD_TOKEN=$TOKEN

"$YARD" metrics-targets -o "$YARD_HOME/targets.json"
python3 - "$YARD_HOME/targets.json" <<'PY' || fail "metrics-targets did not list the head and two nodes"
import json, sys
t = json.load(open(sys.argv[1]))
roles = sorted(g["labels"]["yard_role"] for g in t)
assert roles == ["head", "node", "node"], roles
PY
HEAD_METRICS=$(python3 -c 'import json,sys; print([g["targets"][0] for g in json.load(open(sys.argv[1])) if g["labels"]["yard_role"]=="head"][0])' "$YARD_HOME/targets.json")
CODE=$(python3 - "$HEAD_METRICS" <<'PY'
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen("http://" + sys.argv[1] + "/metrics", timeout=10)
    print(200)
except urllib.error.HTTPError as e:
    print(e.code)
PY
)
[ "$CODE" = 401 ] || fail "a scrape without the web key got HTTP $CODE, not 401"
# The cluster token itself opens nothing here (it never travels over HTTP); the web key does.
scrape_with() {
  python3 - "$HEAD_METRICS" "$1" <<'PY'
import base64, sys, urllib.request, urllib.error
req = urllib.request.Request("http://" + sys.argv[1] + "/metrics")
req.add_header("Authorization", "Basic " + base64.b64encode(("yard:" + sys.argv[2]).encode()).decode())
try:
    urllib.request.urlopen(req, timeout=10)
    print(200)
except urllib.error.HTTPError as e:
    print(e.code)
PY
}
[ "$(scrape_with "$TOKEN")" = 401 ] || fail "a scrape with the cluster token was not refused"
[ "$(scrape_with "$(cat "$KEY_FILE")")" = 200 ] || fail "a scrape with the web key was refused"

# What the queries below should see: a detached actor stays alive; a driver that stays (until
# its stdin closes) ran 50 tasks, each counting a user metric.
"$PROBE" detach metrics-holder > /dev/null || fail "the detached actor did not start"
mkfifo "$YARD_HOME/hold"
"$PROBE" tasks 50 < "$YARD_HOME/hold" > "$YARD_HOME/tasks.out" &
PROBE_PID=$!
exec 3> "$YARD_HOME/hold"
end=$(( $(date +%s) + 60 ))
until grep -q "^sum" "$YARD_HOME/tasks.out"; do
  kill -0 $PROBE_PID 2>/dev/null && [ "$(date +%s)" -lt "$end" ] || fail "the tasks did not run"
  sleep 0.2
done
grep -q "^sum 2450$" "$YARD_HOME/tasks.out" || fail "the tasks returned $(cat "$YARD_HOME/tasks.out")"

cat > "$YARD_HOME/prometheus.yml" <<YML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: yard
    basic_auth:
      username: yard
      password_file: $KEY_FILE
    file_sd_configs:
      - files: [$YARD_HOME/targets.json]
        refresh_interval: 1s
YML
"$PROMETHEUS" --config.file="$YARD_HOME/prometheus.yml" --storage.tsdb.path="$YARD_HOME/prom-data" \
  --web.listen-address="127.0.0.1:$PROM_PORT" > "$YARD_HOME/prometheus.log" 2>&1 3>&- &
PROM_PID=$!

# query EXPR: the value of a PromQL expression with one result ("" when none or not yet).
query() {
  python3 - "$PROM_PORT" "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
url = "http://127.0.0.1:%s/api/v1/query?query=%s" % (sys.argv[1], urllib.parse.quote(sys.argv[2]))
try:
    r = json.load(urllib.request.urlopen(url, timeout=5))
    res = r["data"]["result"]
    print(res[0]["value"][1] if len(res) == 1 else "")
except Exception:
    print("")
PY
}
# expect EXPR VALUE: waits (up to 60 s) until the expression's value is VALUE.
expect() {
  local end=$(( $(date +%s) + 60 )) got=""
  while :; do
    got=$(query "$1")
    [ "$got" = "$2" ] && return 0
    [ "$(date +%s)" -lt "$end" ] || fail "$1 is '$got', expected $2"
    sleep 0.5
  done
}
expect 'count(up{job="yard"} == 1)' 3
expect 'sum(yard_node_resources{resource="CPU"})' 3
expect 'yard_nodes{state="alive"}' 2
expect 'yard_actors{state="ALIVE",class="Holder"}' 1
expect 'yard_jobs{status="SUCCEEDED"}' 1
expect 'yard_jobs{status="RUNNING"}' 1
expect 'sum(yard_tasks_submitted_total{function="twice"})' 50
expect 'sum(yard_tasks_finished_total{function="twice"})' 50
expect 'sum(yard_task_duration_seconds_count{function="twice"})' 50
expect 'sum(yard_tasks_running{function="twice"})' 0
expect 'sum(probe_values_total{parity="odd"})' 25
expect 'sum(probe_values_total{parity="even"})' 25
expect 'sum(probe_value_bucket{le="10"})' 11
expect 'sum(probe_value_sum)' 1225
expect 'sum(yard_lease_workers_granted_total) > bool 0' 1
expect 'sum(yard_lease_wait_seconds_count) > bool 0' 1
expect 'count(process_resident_memory_bytes > 0)' 3
expect 'yard_control_store_reconnects_total' 0
expect 'yard_control_store_unacknowledged_total' 0
# The driver ends: its job counts as succeeded; what its workers counted stays counted.
exec 3>&-
wait $PROBE_PID || fail "the driver failed"
PROBE_PID=
expect 'yard_jobs{status="SUCCEEDED"}' 2
expect 'sum(yard_tasks_finished_total{function="twice"})' 50
# A node that goes silent (kill -9 of its manager): its missed heartbeat is counted, and it is dead.
"$YARD" start --address "127.0.0.1:$PORT" --token "$TOKEN" --port 0 --num-cpus 1 > "$YARD_HOME/node3.txt"
NODE3=$(sed -n 's/.*node started at \([^,]*\),.*/\1/p' "$YARD_HOME/node3.txt")
NODE3_PID=$(python3 -c '
import json,glob,sys
for f in glob.glob(sys.argv[1] + "/clusters/*.json"):
    r = json.load(open(f))
    if r["address"] == sys.argv[2]: print(r["pid"])' "$YARD_HOME" "$NODE3")
[ -n "$NODE3_PID" ] || fail "the third node did not start: $(cat "$YARD_HOME/node3.txt")"
kill -9 "$NODE3_PID"
expect 'sum(yard_heartbeats_missed_total)' 1
expect 'yard_nodes{state="dead"}' 1
echo "PASS: Prometheus scraped the head and both nodes with the token; queries match"
