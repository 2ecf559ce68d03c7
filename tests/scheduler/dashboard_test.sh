#!/usr/bin/env bash
# Headless Chromium loads the dashboard of a running cluster while the railway training job runs
# on it (submitted with yard submit): the rendered page lists the head's node, the job's trainer
# and checkpointer actors and the job, streams the job's log and charts its loss, validation loss
# and F1, and shows a job waiting in the queue with why it waits; a screenshot is kept
# (ARTIFACT_DIR/dashboard.png).
# Requests without the cluster's web key get 401, and so do requests with the cluster token (which
# never travels over HTTP). Needs Debian's chromium: skipped (exit 77) without it.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
YARD=$(readlink -f "$1")
TRAIN=$(readlink -f "$2")
ARTIFACTS=${3:-/tmp}
CHROMIUM=$(command -v chromium || true)
if [ -z "$CHROMIUM" ]; then
  echo "SKIP: this test needs chromium (Debian package chromium; scripts/setup-deps installs it)"
  exit 77
fi
export YARD_HOME=$(mktemp -d /tmp/yard-dashboard-XXXXXX)
cleanup() {
  set +e
  [ -n "${JOB:-}" ] && "$YARD" stop-job "$JOB" > /dev/null 2>&1
  for p in $(daemon_pids) $(redis_pids); do kill -9 "$p" 2>/dev/null; done
  rm -rf "$YARD_HOME"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$YARD" start --head --port "$PORT" --num-cpus 2 --control-replicas 2 > /dev/null
export YARD_ADDRESS=127.0.0.1:$PORT
cd "$YARD_HOME"
# Enough epochs to be still training when the page is loaded; stopped once it has been looked at.
JOB=$("$YARD" submit --no-wait -- "$TRAIN" --epochs 40 --workers 1 --logs 1 --length-km 8 --batch 16 | grep -o 'job-[0-9a-z-]*' | head -1)
[ -n "$JOB" ] || fail "the job was not submitted"
end=$(( $(date +%s) + 120 ))
until "$YARD" logs "$JOB" 2>/dev/null | grep -q "^epoch 1/40  steps"; do
  [ "$(date +%s)" -lt "$end" ] || fail "the job did not train: $("$YARD" logs "$JOB" 2>&1)"
  sleep 0.2
done
# A job with a shape no node can hold waits in the queue, which the page shows with the reason.
QJOB=$("$YARD" submit --no-wait --replicas 1 --replica CPU=64 -- sleep 60 | grep -o 'job-[0-9a-z-]*' | head -1)
[ -n "$QJOB" ] || fail "the queued job was not submitted"
URL=$("$YARD" dashboard)
BASE=${URL%%/\?*}
for path in / /api/status "/api/jobs/$JOB/logs" /static/chart.js; do
  CODE=$(python3 -c 'import sys, urllib.request, urllib.error
try: urllib.request.urlopen(sys.argv[1], timeout=10); print(200)
except urllib.error.HTTPError as e: print(e.code)' "$BASE$path")
  [ "$CODE" = 401 ] || fail "$path without the web key: HTTP $CODE, not 401"
done
TOKEN=$(cat "$YARD_HOME"/session-*/token)
case "$URL" in *"$TOKEN"*) fail "the dashboard's address carries the cluster token" ;; esac
CODE=$(python3 -c 'import sys, urllib.request, urllib.error
try: urllib.request.urlopen(sys.argv[1], timeout=10); print(200)
except urllib.error.HTTPError as e: print(e.code)' "$BASE/api/status?key=$TOKEN")
[ "$CODE" = 401 ] || fail "the cluster token opened the dashboard: HTTP $CODE"
HEAD_NODE=$("$YARD" status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["cluster"]["head_node"])')
chrome() {
  "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir="$YARD_HOME/chrome" \
    --virtual-time-budget=10000 "$@" 2> "$YARD_HOME/chrome.log"
}
chrome --dump-dom "$URL" > "$YARD_HOME/dom.html" || fail "chromium failed: $(tail -5 "$YARD_HOME/chrome.log")"
check() { grep -q -- "$1" "$YARD_HOME/dom.html" || fail "the page does not show $2"; }
check "$HEAD_NODE" "the head's node $HEAD_NODE"
check "RailwayTrainer<" "the trainer actor's class"
check "Checkpointer<" "the checkpointer actors' class"
check "$JOB" "the job"
check 'data-name="railway_train_loss"' "a chart of the job's training loss"
check 'data-name="railway_validation_loss"' "a chart of the job's validation loss"
check 'data-name="railway_validation_macro_f1" data-points="[1-9][0-9]*" data-marked="1"' "a chart of the job's F1 with its epochs' points marked"
check "epoch 1/40  steps" "the job's log"
check "data-job=\"$QJOB\"><td>$QJOB</td><td>-</td><td>0</td><td class=\"QUEUED\">QUEUED</td><td>0/1:1</td>" "the queued job in the queue view"
check "<td>infeasible: " "why the queued job waits"
check "Control store: primary 127.0.0.1:[0-9]*, 2 of 2 replicas online, 3 of 3 Sentinels answering, failover possible" \
  "the replicated control store"
mkdir -p "$ARTIFACTS"
chrome --screenshot="$ARTIFACTS/dashboard.png" --window-size=1280,1800 "$URL" > /dev/null || fail "no screenshot"
[ "$(stat -c %s "$ARTIFACTS/dashboard.png")" -gt 10000 ] || fail "the screenshot is empty"
"$YARD" stop-job "$JOB" > /dev/null
echo "PASS: the dashboard shows the node, the training job's actors, the job, its log and its loss, validation loss and F1 charts; screenshot in $ARTIFACTS/dashboard.png"
