#!/usr/bin/env bash
# Preemption that shrinks instead of killing: a low-priority railway job queued with
# `--replicas 1:2` (an elastic group, --workers 1:2) trains on both trainer slots of the pool; a
# high-priority job needing one slot arrives. The low job lets one trainer go at a step boundary
# (no checkpoint read, no group restart), the high job is admitted into the room and runs, the
# preemption names who took the room (an event, `yard jobs` and the job's own log), and when the high job ends the low job grows
# back to two trainers and finishes every epoch.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
YARD=$(readlink -f "$1")
TRAIN=$(readlink -f "$2")
start_test_home train-preempt
trap end_test_home EXIT
start_trainer_cluster 2
mkdir -p "$YARD_HOME/work"
cd "$YARD_HOME/work"
# Rank 0 takes 3 times as long per step: the job is still training when the high job comes and goes.
"$YARD" submit --replicas 1:2 --replica CPU=1,trainer=1 --priority 1 --env RAILWAY_TRAIN_SLOW_RANK=0:2 -- \
  "$TRAIN" --epochs 10 --workers 1:2 --trainer-resources '{"CPU": 1, "trainer": 1}' --logs 1 --length-km 8 \
  --batch 16 --checkpoint-every 10 > out.txt 2>&1 &
pid=$!
await_line "$pid" "(training with 2 trainers|resized: 1 -> 2 trainers)"
low=$(grep -m1 -oE "submitted job-[0-9]+" out.txt | awk '{print $2}')

"$YARD" submit --no-wait --replicas 1 --replica CPU=1,trainer=1 --priority 5 -- sh -c 'echo high job ran; sleep 3' > high.txt
high=$(cat high.txt)
echo "low job $low, high job $high"
await_line "$pid" "^resized: 2 -> 1 trainers"
# The job's own log names who took the room.
grep -E "^elastic group: 2 -> 1 trainers at step [0-9]+ \(1 released to the job queue \(1 replica released \(on [^)]+\) for $high at [0-9]+\)\)" out.txt
grown=$(grep -c "^resized: 1 -> 2 trainers" out.txt || true)
deadline=$((SECONDS + 120))
until "$YARD" logs "$high" 2>/dev/null | grep -q "high job ran"; do
  if [ $SECONDS -gt $deadline ]; then "$YARD" jobs; echo "the high-priority job did not run"; exit 1; fi
  sleep 0.2
done
# Grown back once the high job's room is free (a second "1 -> 2" when it started with 1).
deadline=$((SECONDS + 300))
until [ "$(grep -c "^resized: 1 -> 2 trainers" out.txt || true)" -gt "$grown" ]; do
  if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -gt $deadline ]; then cat out.txt; echo "the low job did not grow back"; exit 1; fi
  sleep 0.05
done
await_job "$pid"
pid=""
grep -q "^epoch 10/10  steps" out.txt
! grep -q "restarting the group" out.txt
! grep -q "continued from the newest checkpoint" out.txt
"$YARD" jobs --json > jobs.json
python3 - "$low" "$high" jobs.json <<'PY'
import json, sys
low, high, path = sys.argv[1], sys.argv[2], sys.argv[3]
jobs = {j["job_id"]: j for j in json.load(open(path))}
note = jobs[low].get("preempted", "")
assert ("for " + high) in note and note.startswith("1 replica released"), jobs[low]
assert jobs[high]["status"] == "SUCCEEDED", jobs[high]
print(low, "preempted:", note)
PY
echo "train preempt: ok"
