#!/usr/bin/env bash
# Spot notices (`yard drain NODE --deadline SECONDS`): a railway job queued with `--replicas 1:2`
# trains with two trainers on two trainer nodes. A notice on the node of its second trainer: that
# replica is above MIN and leaves at a step boundary (no restart, no checkpoint read), and the node
# leaves the cluster. A notice on the node of its last trainer: the job is at MIN and no other node
# can take the trainer, so it is asked to stop 10 s before the node goes; it commits a checkpoint
# (before the queue's stop deadline, or it would have been stopped without one) and is queued
# again. A new node joins; the job is admitted again, resumes at the step it stopped with no step
# trained twice, and finishes every epoch.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
YARD=$(readlink -f "$1")
TRAIN=$(readlink -f "$2")
start_test_home train-notice
trap end_test_home EXIT
start_trainer_cluster 2
mkdir -p "$YARD_HOME/work"
cd "$YARD_HOME/work"
"$YARD" submit --replicas 1:2 --replica CPU=1,trainer=1 --env RAILWAY_TRAIN_SLOW_RANK=0:2 -- \
  "$TRAIN" --epochs 6 --workers 1:2 --trainer-resources '{"CPU": 1, "trainer": 1}' --logs 1 --length-km 8 \
  --batch 16 --checkpoint-every 40 > out.txt 2>&1 &
pid=$!
await_line "$pid" "(training with 2 trainers|resized: 1 -> 2 trainers)" > /dev/null
nodes=$(grep "^trainer nodes:" out.txt | tail -1)
echo "$nodes"
second=$(echo "$nodes" | awk '{print $4}')
"$YARD" drain "$second" --deadline 30 > drain1.txt 2>&1
cat drain1.txt
grep -q "it has left the cluster" drain1.txt
await_line "$pid" "^resized: 2 -> 1 trainers" > /dev/null
! grep -q "restarting the group" out.txt
! grep -q "continued from the newest checkpoint" out.txt

last=$(grep "^trainer nodes:" out.txt | tail -1 | awk '{print $3}')
echo "the last trainer is on $last"
"$YARD" drain "$last" --deadline 30 > drain2.txt 2>&1 &
drain=$!
at=$(await_queue_stop "$pid")
wait "$drain"
cat drain2.txt
start_trainer_node
await_resume_at "$pid" "$at"
await_job "$pid"
pid=""
grep -q "^epoch 6/6  steps" out.txt
python3 - railway-out/metrics.jsonl <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
# (A checkpointer on a noticed node moves at once; its loss is reported too.)
rec = [r for r in lines if r.get("event") == "recovery" and "stopped by the job queue" in r["lost"]]
assert len(rec) == 1 and rec[0]["asked"], rec
assert rec[0]["steps_redone"] == 0, rec
shrunk = [r for r in lines if r.get("event") == "resize" and r["old_world"] == 2 and r["new_world"] == 1]
assert shrunk and not any(r.get("from_disk") for r in shrunk), shrunk
assert [r["epoch"] for r in lines if r.get("event") == "epoch"] == [1, 2, 3, 4, 5, 6]
print("notices: one replica left without a restart; the job at MIN stopped at step", rec[0]["error"], "and lost 0 steps")
PY
echo "train notice: ok"
