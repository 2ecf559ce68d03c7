#!/usr/bin/env bash
# A node in its own network namespace, behind a veth pair: it joins the head across the link, the
# driver calls an actor there directly, then the link is cut. The head declares the node dead, the
# actor restarts on the head's node and the driver's next call reaches it; when the link comes
# back the node fences itself (its old workers stop) and rejoins empty.
# Needs root for `ip netns`: skipped (exit 77) with a message otherwise.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
YARD=$1
PROBE=$2
NS=yard-t-$$
VH=yh$$
VN=yn$$
if [ "$(id -u)" != 0 ] || ! ip netns add "$NS" 2>/dev/null; then
  echo "SKIP: this test needs root and 'ip netns' (network namespaces)"
  exit 77
fi
SUB=10.77.$(( $$ % 200 + 20 ))
H=$SUB.1
N=$SUB.2
export YARD_HOME=$(mktemp -d /tmp/yard-netns-XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
PROBE_PID=
PROM_PID=
cleanup() {
  set +e
  [ -n "$PROBE_PID" ] && kill -9 "$PROBE_PID" 2>/dev/null
  [ -n "$PROM_PID" ] && kill -9 "$PROM_PID" 2>/dev/null
  for p in $(daemon_pids) $(redis_pids); do kill -9 "$p" 2>/dev/null; done
  ip netns pids "$NS" 2>/dev/null | xargs -r kill -9
  ip netns del "$NS" 2>/dev/null
  ip link del "$VH" 2>/dev/null
  rm -rf "$YARD_HOME"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
wait_for() {  # wait_for SECONDS COMMAND...: until the command succeeds
  local end=$(( $(date +%s) + $1 )); shift
  until "$@"; do [ "$(date +%s)" -lt "$end" ] || return 1; sleep 0.2; done
}

ip link add "$VH" type veth peer name "$VN"
ip link set "$VN" netns "$NS"
ip addr add "$H/24" dev "$VH"
ip link set "$VH" up
ip netns exec "$NS" ip addr add "$N/24" dev "$VN"
ip netns exec "$NS" ip link set "$VN" up
ip netns exec "$NS" ip link set lo up

"$YARD" start --head --host "$H" --port "$PORT" --num-cpus 1 --heartbeat-timeout 2 --metrics-port 0 > /dev/null
TOKEN=$(cat "$YARD_HOME"/session-*/token)
# YARD_HOST_ID: the node counts as another machine (it shares this one's /dev/shm, but nothing
# may go through it).
ip netns exec "$NS" env YARD_HOST_ID=netns-node "$YARD" start --address "$H:$PORT" --token "$TOKEN" --host "$N" \
  --num-cpus 1 --heartbeat-timeout 2 --metrics-port 0 > /dev/null
status() { "$YARD" status --json --address "$H:$PORT" --token "$TOKEN"; }
node_field() {  # node_field ADDRESS_PREFIX FIELD
  status | python3 -c 'import json,sys; [print(n.get(sys.argv[2], "")) for n in json.load(sys.stdin)["nodes"] if n["address"].startswith(sys.argv[1] + ":")]' "$1" "$2"
}
NODE=$(node_field "$N" node_id)
HEAD_NODE=$(node_field "$H" node_id)
[ -n "$NODE" ] || fail "the namespaced node did not join"
echo "node $NODE joined from $N; head node $HEAD_NODE at $H"


# Links between the hosts are encrypted (CurveZMQ between processes, TLS to the control store):
# a capture of the link while a value crosses it, both ways, shows neither the value, nor the
# token, nor the control store's password.
PASSWORD=$(cat "$YARD_HOME"/session-*/redis/password)
[ -n "$PASSWORD" ] && [ "$PASSWORD" != "$TOKEN" ] || fail "the control store's password is missing or is the token"
MARK=yard-marker-$$-$RANDOM
tcpdump -i "$VH" -B 32768 --immediate-mode -U -w "$YARD_HOME/link.pcap" tcp 2> /dev/null &
DUMP_PID=$!
wait_for 10 test -s "$YARD_HOME/link.pcap" || fail "tcpdump did not start"
echoed=$(YARD_ADDRESS="$H:$PORT" YARD_TOKEN="$TOKEN" "$PROBE" echo "$NODE" "$MARK") || fail "the echo across the link failed"
[ "$echoed" = "$MARK$MARK" ] || fail "the echo across the link returned '$echoed'"
kill -INT $DUMP_PID; wait $DUMP_PID 2> /dev/null || true
bytes=$(stat -c %s "$YARD_HOME/link.pcap")
[ "$bytes" -gt 2000 ] || fail "the capture of the link holds only $bytes bytes"
! grep -aq "$MARK" "$YARD_HOME/link.pcap" || fail "the value crossed the link in clear"
! grep -aqF "$TOKEN" "$YARD_HOME/link.pcap" || fail "the cluster token crossed the link in clear"
! grep -aqF "$PASSWORD" "$YARD_HOME/link.pcap" || fail "the control store's password crossed the link in clear"
# (The node's heartbeats to the control store crossed it meanwhile: in clear they name yard:node:…)
! grep -aq "yard:node:" "$YARD_HOME/link.pcap" || fail "the control store's traffic crossed the link in clear"
echo "a value crossed the link both ways; a capture of it ($bytes bytes) holds neither the value, the token nor the password"
# A large value (24 MB of the mark, in parts) comes back on the holder's data link, sealed with
# AES-GCM: intact, no mark in the capture, and most of it from a second port of the holder (its
# data link), beside the one it was asked on (the first 256 KB, over CurveZMQ).
tcpdump -i "$VH" -B 32768 --immediate-mode -U -w "$YARD_HOME/big.pcap" tcp 2> /dev/null &
DUMP_PID=$!
wait_for 10 test -s "$YARD_HOME/big.pcap" || fail "tcpdump did not start"
big=$(YARD_ADDRESS="$H:$PORT" YARD_TOKEN="$TOKEN" "$PROBE" echo "$NODE" "$MARK" 25165824) || fail "the large value across the link failed"
kill -INT $DUMP_PID; wait $DUMP_PID 2> /dev/null || true
[ "$big" = intact ] || fail "the large value across the link came back $big"
! grep -aq "$MARK" "$YARD_HOME/big.pcap" || fail "the large value crossed the link in clear"
ports=$(tcpdump -r "$YARD_HOME/big.pcap" -nn -q "src host $N" 2> /dev/null | python3 -c '
import collections, sys
sent = collections.Counter()
for line in sys.stdin:
    f = line.split()  # TIME IP SRC.PORT > DST.PORT: tcp LEN
    if len(f) >= 7 and f[-1].isdigit():
        sent[f[2].rsplit(".", 1)[1]] += int(f[-1])
print(" ".join("%s:%d" % kv for kv in sorted(sent.items(), key=lambda kv: -kv[1])[:3]))')
heavy=$(tr ' ' '\n' <<< "$ports" | awk -F: '$2 >= 200000' | wc -l)
[ "$heavy" -ge 2 ] && [ "$(tr ' ' '\n' <<< "$ports" | awk -F: '$2 >= 16000000' | wc -l)" -ge 1 ] || fail "the large value did not come over a data link (bytes sent per port of the node: $ports)"
echo "24 MB of a mark came back intact over the holder's data link (bytes per port: $ports); the capture holds no mark"
# Sizes around the part size (and the data link's small first part) come through it intact.
parts=$(YARD_ADDRESS="$H:$PORT" YARD_TOKEN="$TOKEN" timeout 300 "$PROBE" parts "$NODE" 2>&1) || fail "the parts across the link failed: $parts"
grep -q "intact 12 of 12" <<< "$parts" || fail "objects of sizes around the part size across the link: $parts"
echo "objects of 12 sizes around the part size came through the data link intact"
# The node's data link answers nothing to a client without its key, and says so in its log.
DATA=$(cat "$YARD_HOME"/session-*/logs/*.log | grep -o "data link $N:[0-9]*" | head -1 | cut -d' ' -f3 || true)
[ -n "$DATA" ] || fail "the node did not log its data link (logs: $(ls "$YARD_HOME"/session-*/logs/))"
raw=$("$PROBE" raw "$DATA")
[ "$raw" = silence ] || fail "a client without the data link's key got '$raw'"
wait_for 10 grep -q "not sealed with its key" "$YARD_HOME"/session-*/logs/node.log || fail "the node did not log the unsealed message"
echo "a client without the key got silence from the node's data link $DATA, which logged it"
# A collective group with a rank on each host seals its traffic too: allreduces and a broadcast of
# 5 MB of a mark cross the link without the mark in clear (a capture under load may miss packets: it
# needs 2 MB of the 10 MB or so that cross).
tcpdump -i "$VH" -B 32768 --immediate-mode -U -w "$YARD_HOME/ring.pcap" tcp 2> /dev/null &
DUMP_PID=$!
wait_for 10 test -s "$YARD_HOME/ring.pcap" || fail "tcpdump did not start"
ring=$(YARD_ADDRESS="$H:$PORT" YARD_TOKEN="$TOKEN" "$PROBE" ring "$NODE" "$HEAD_NODE" "$MARK") || fail "the collective group across the link failed: $ring"
kill -INT $DUMP_PID; wait $DUMP_PID 2> /dev/null || true
[ "$ring" = "ok sealed"$'\n'"ok sealed" ] || fail "the collective group across the link said: $ring"
bytes=$(stat -c %s "$YARD_HOME/ring.pcap")
[ "$bytes" -gt 2000000 ] || fail "the capture of the collective group holds only $bytes bytes"
! grep -aq "$MARK" "$YARD_HOME/ring.pcap" || fail "the collective group's data crossed the link in clear"
echo "a collective group across the link agreed on its results; a capture of it ($bytes bytes) holds no mark"
# The web endpoints beyond loopback speak HTTPS, all with the cluster's web identity: a client that
# trusts <session>/web/tls.crt for the name switchyard-web reaches the head's and both nodes'
# metrics and the dashboard with the web key; a wrong key gets 401, plain HTTP nothing, and a
# capture of the link holds neither the key nor the metrics. Prometheus scrapes them all.
WEB_KEY=$(cat "$YARD_HOME"/session-*/web_key)
CA=$(echo "$YARD_HOME"/session-*/web/tls.crt)
[ -s "$CA" ] || fail "the head made no web certificate"
"$YARD" metrics-targets --address "$H:$PORT" --token "$TOKEN" -o "$YARD_HOME/targets.json" 2> "$YARD_HOME/targets.err" ||
  fail "metrics-targets failed: $(cat "$YARD_HOME/targets.err")"
grep -q "server_name: switchyard-web" "$YARD_HOME/targets.err" || fail "metrics-targets did not say how to scrape HTTPS"
endpoints=$(python3 -c 'import json,sys; [print(g["targets"][0], g["labels"].get("__scheme__", "http")) for g in json.load(open(sys.argv[1]))]' "$YARD_HOME/targets.json")
[ "$(wc -l <<< "$endpoints")" = 3 ] || fail "metrics-targets listed: $endpoints"
https_get() {  # https_get HOST:PORT PATH CURL_ARGS...: prints the HTTP status, the body in $YARD_HOME/body
  local hp=$1 path=$2; shift 2
  curl -s -m 10 -o "$YARD_HOME/body" -w '%{http_code}' --cacert "$CA" --resolve "switchyard-web:${hp##*:}:${hp%:*}" \
    "$@" "https://switchyard-web:${hp##*:}$path" || true
}
tcpdump -i "$VH" -B 32768 --immediate-mode -U -w "$YARD_HOME/web.pcap" tcp 2> /dev/null &
DUMP_PID=$!
wait_for 10 test -s "$YARD_HOME/web.pcap" || fail "tcpdump did not start"
while read -r ep scheme; do
  [ "$scheme" = https ] || fail "$ep is listed for $scheme"
  [ "$(https_get "$ep" /metrics -u "yard:$WEB_KEY")" = 200 ] || fail "$ep refused the web key over HTTPS"
  grep -q '^process_resident_memory_bytes' "$YARD_HOME/body" || fail "$ep served no metrics"
  [ "$(https_get "$ep" /metrics -u yard:wrong)" = 401 ] || fail "$ep did not refuse a wrong key"
  plain=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://$ep/metrics" || true)
  [ "$plain" != 200 ] && [ "$plain" != 401 ] || fail "$ep answered plain HTTP ($plain)"
done <<< "$endpoints"
DASH=$(status | python3 -c 'import json,sys; print(json.load(sys.stdin)["cluster"]["dashboard"])')
[ "${DASH%%://*}" = https ] || fail "the dashboard is at $DASH"
[ "$(https_get "${DASH#https://}" /api/status -H "Authorization: Bearer $WEB_KEY")" = 200 ] &&
  grep -q "$NODE" "$YARD_HOME/body" || fail "the dashboard did not answer over HTTPS"
[ "$(https_get "${DASH#https://}" /api/status)" = 401 ] || fail "the dashboard answered without the key"
NODE_EP=$(grep "^$N:" <<< "$endpoints" | cut -d' ' -f1)
[ "$(https_get "$NODE_EP" /metrics -u "yard:$WEB_KEY")" = 200 ] || fail "the namespaced node's metrics went away"
kill -INT $DUMP_PID; wait $DUMP_PID 2> /dev/null || true
! grep -aqF "$WEB_KEY" "$YARD_HOME/web.pcap" || fail "the web key crossed the link in clear"
! grep -aqF "$(printf 'yard:%s' "$WEB_KEY" | base64 -w0)" "$YARD_HOME/web.pcap" || fail "the web key crossed the link in clear"
! grep -aq "yard_node_resources" "$YARD_HOME/web.pcap" || fail "the metrics crossed the link in clear"
echo "metrics of the head and both nodes and the dashboard answered over HTTPS only; the capture holds no key"
if PROMETHEUS=$(command -v prometheus); then
  PROM_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat > "$YARD_HOME/prometheus.yml" <<YML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: yard
    basic_auth: {username: yard, password_file: $(echo "$YARD_HOME"/session-*/web_key)}
    tls_config: {ca_file: $CA, server_name: switchyard-web}
    file_sd_configs: [{files: [$YARD_HOME/targets.json], refresh_interval: 1s}]
YML
  "$PROMETHEUS" --config.file="$YARD_HOME/prometheus.yml" --storage.tsdb.path="$YARD_HOME/prom-data" \
    --web.listen-address="127.0.0.1:$PROM_PORT" > "$YARD_HOME/prometheus.log" 2>&1 &
  PROM_PID=$!
  scraped() {
    [ "$(python3 - "$PROM_PORT" <<'PY'
import json, sys, urllib.request
try:
    r = json.load(urllib.request.urlopen("http://127.0.0.1:%s/api/v1/query?query=sum(up)" % sys.argv[1], timeout=5))
    print(r["data"]["result"][0]["value"][1])
except Exception:
    print("")
PY
)" = 3 ]
  }
  wait_for 60 scraped || { tail -5 "$YARD_HOME/prometheus.log"; fail "Prometheus did not scrape the three endpoints over HTTPS"; }
  kill "$PROM_PID"; wait "$PROM_PID" 2> /dev/null || true
  PROM_PID=
  echo "Prometheus scraped the head and both nodes over HTTPS"
else
  echo "(Prometheus is not installed: its scrape over HTTPS was not tried)"
fi
# Without the cluster's keys: nothing comes back, and a node with a wrong token is refused.
raw=$(ip netns exec "$NS" "$PROBE" raw "$H:$PORT")
[ "$raw" = silence ] || fail "a client without keys got '$raw'"
wrong=$(ip netns exec "$NS" env YARD_HOST_ID=netns-node "$YARD" start --address "$H:$PORT" --token wrong-token \
  --host "$N" --num-cpus 1 2>&1) && fail "a node with a wrong token joined: $wrong"
grep -q "cluster token" <<< "$wrong" || fail "a node with a wrong token was refused without saying why: $wrong"
grep -q "refused a connection" "$YARD_HOME"/session-*/logs/head.log || fail "the head did not log the refused peers"
echo "a client without keys got silence; a node with a wrong token was refused: $(tail -1 <<< "$wrong")"

coproc P { YARD_ADDRESS="$H:$PORT" YARD_TOKEN="$TOKEN" "$PROBE" remote "$NODE"; }
PROBE_PID=$P_PID
read -r -t 60 first <&"${P[0]}" || fail "the driver did not start its actor"
[ "$first" = "on $NODE" ] || fail "the actor runs on '$first', not on $NODE"
echo "driver called the actor across namespaces: $first"

ip link set "$VH" down
t0=$(date +%s.%N)
dead() { [ "$(node_field "$N" state)" = DEAD ]; }
wait_for 15 dead || fail "the cut-off node was not declared dead"
echo "declared dead after $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
echo go >&"${P[1]}"
read -r -t 60 second <&"${P[0]}" || fail "the driver's call after the cut did not return"
[ "$second" = "now $HEAD_NODE" ] || fail "after the cut the actor runs on '$second', not on $HEAD_NODE"
wait "$PROBE_PID" || fail "the driver failed"
PROBE_PID=
echo "the actor restarted on the head's node; the driver's call reached it"

ip link set "$VH" up
# (The status is read whole first: `status | grep -q` under pipefail fails whenever grep exits
# before the CLI has written all of it.)
alive() { [ "$(node_field "$N" state)" = ALIVE ] && grep -q '"alive": true' <<< "$(status)"; }
node_log() { tail -q -n 3 "$YARD_HOME"/session-*/logs/node.log "$YARD_HOME"/session-*/logs/head.log | tr '\n' ' '; }
wait_for 30 alive || fail "the node did not come back after the link was restored (state $(node_field "$N" state), \
workers $(node_field "$N" workers); the logs end: $(node_log))"
echo "the node rejoined after the link came back"
# The head places actors there again once its view of the node has caught up.
placeable() { YARD_ADDRESS="$H:$PORT" YARD_TOKEN="$TOKEN" "$PROBE" workdir "$NODE" > /dev/null 2>&1; }
wait_for 30 placeable || fail "no actor could be placed on the rejoined node"
big=$(YARD_ADDRESS="$H:$PORT" YARD_TOKEN="$TOKEN" timeout 300 "$PROBE" big "$NODE") || fail "the 100 MB transfers failed"
[ "$big" = "intact 3" ] || fail "100 MB across the link: $big"
echo "a 100 MB argument, a 100 MB ref argument and a 100 MB object came through the link intact"
share=$(YARD_ADDRESS="$H:$PORT" YARD_TOKEN="$TOKEN" timeout 300 "$PROBE" share "$NODE" 2>&1 | tr '\n' ' ') ||
  fail "the shared fetch failed: $share"
[ "$share" = "announced 1 shared 1 withdrawn 1 " ] || fail "an object from the other host, fetched once here: $share"
echo "an object from the other node was fetched once on this one and served here after its owner died"
"$YARD" stop --address "$H:$PORT" --token "$TOKEN" > /dev/null
echo PASS
