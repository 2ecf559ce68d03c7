#!/usr/bin/env bash
# The railway job as an elastic group (--workers 2:3) on a head and trainer nodes: it starts with
# the two trainer nodes there are, grows to 3 when a third node joins, shrinks to 2 when that node
# is drained, loses a trainer to kill -9 in the middle of training and regrows, and finishes every
# epoch. No resize reads a checkpoint (the state comes from the survivors' memory) and no group
# restart happens, until every trainer is lost at once: then, and only then, the newest
# checkpoint is read.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
YARD=$(readlink -f "$1")
TRAIN=$(readlink -f "$2")
start_test_home train-elastic
trap end_test_home EXIT
# Rank 0 takes 3 times as long per step: time for nodes to come and go within the run.
export RAILWAY_TRAIN_SLOW_RANK=0:2
export YARD_ADDRESS=$("$YARD" start --head --port 0 --num-cpus 2 --heartbeat-timeout 2 | awk '/started at/ {print $5; exit}')
export YARD_TOKEN=$(cat "$YARD_HOME"/session-*/token)
add_node() {
  "$YARD" start --address "$YARD_ADDRESS" --num-cpus 1 --resources '{"trainer": 1}' --heartbeat-timeout 2 |
    awk '/started at/ {print $5; exit}' | tr -d ,
}
add_node > /dev/null
add_node > /dev/null
cd "$YARD_HOME"
"$TRAIN" --epochs 8 --workers 2:3 --trainer-resources '{"CPU": 1, "trainer": 1}' --logs 1 --length-km 8 --batch 16 \
  --checkpoint-every 10 > out.txt 2>&1 &
pid=$!
await_line "$pid" "^elastic group: training with 2 trainers" > /dev/null
deadline=$((SECONDS + 300))
until [ "$(cat railway-out/steps.jsonl 2>/dev/null | wc -l)" -ge 5 ]; do
  if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -gt $deadline ]; then cat out.txt; echo "no training steps"; exit 1; fi
  sleep 0.05
done

third=$(add_node)
echo "node at $third joined"
await_line "$pid" "^resized: 2 -> 3 trainers"
node_id=$("$YARD" status --json | python3 -c 'import json,sys; print([n["node_id"] for n in json.load(sys.stdin)["nodes"] if n["address"] == sys.argv[1]][0])' "$third")
"$YARD" drain "$node_id" --timeout 120
await_line "$pid" "^resized: 3 -> 2 trainers"

victim=$(grep "^trainer pids:" out.txt | head -1 | awk '{print $4}')
echo "kill -9 of trainer pid $victim"
kill -9 "$victim"
await_line "$pid" "^a trainer was lost in training .*; the survivors go on"
await_line "$pid" "^resized: 2 -> 2 trainers"

victims=$(grep "^trainer pids:" out.txt | tail -1 | cut -d: -f2)
echo "kill -9 of every trainer:$victims"
kill -9 $victims
await_line "$pid" "\(2 lost, 2 joined\); no trainer's state survived: continued from the newest checkpoint"
await_job "$pid"
pid=""
grep -q "^epoch 8/8  steps" out.txt
! grep -q "restarting the group" out.txt
python3 - railway-out/metrics.jsonl <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
resizes = [e for e in events if e.get("event") == "resize"]
worlds = [(e["old_world"], e["new_world"]) for e in resizes]
assert worlds == [(2, 3), (3, 2), (2, 2), (2, 2)], worlds
assert [e["from_checkpoint"] for e in resizes] == [False, False, False, True], resizes
assert all(e["pause_s"] < 30 and e["lr"] > 0 for e in resizes), resizes
assert not [e for e in events if e.get("event") == "recovery"], "a group restart was reported"
epochs = [e for e in events if e.get("event") == "epoch"]
assert len(epochs) == 8, len(epochs)
print("resizes:", worlds, "pauses:", [round(e["pause_s"], 2) for e in resizes])
PY
echo "train elastic: ok"
