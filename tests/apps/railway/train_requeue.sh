#!/usr/bin/env bash
# Preemption at MIN: a low-priority railway job queued with `--replicas 1:2` trains on both trainer
# slots of the pool; a high-priority job needing both slots arrives. Shrinking to MIN would not make
# room, so the low job is asked to stop: it commits a checkpoint at a step boundary and exits, the
# queue takes it back (same job id, same `yard submit` following its log), the high job runs, and
# the low job is admitted again, resumes from that checkpoint with no step trained twice, and
# finishes every epoch. `yard jobs` names who took the room; the job's record counts the requeue.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
YARD=$(readlink -f "$1")
TRAIN=$(readlink -f "$2")
start_test_home train-requeue
trap end_test_home EXIT
cat > "$YARD_HOME/cluster.toml" <<'EOF'
[queue]
stop_grace_s = 120
EOF
start_trainer_cluster 2 --config "$YARD_HOME/cluster.toml"
mkdir -p "$YARD_HOME/work"
cd "$YARD_HOME/work"
# Rank 0 takes 3 times as long per step: the job is still training when the high job comes.
"$YARD" submit --replicas 1:2 --replica CPU=1,trainer=1 --priority 1 --env RAILWAY_TRAIN_SLOW_RANK=0:2 -- \
  "$TRAIN" --epochs 4 --workers 1:2 --trainer-resources '{"CPU": 1, "trainer": 1}' --logs 1 --length-km 8 \
  --batch 16 --checkpoint-every 40 > out.txt 2>&1 &
pid=$!
await_line "$pid" "(training with 2 trainers|resized: 1 -> 2 trainers)"
low=$(grep -m1 -oE "submitted job-[0-9]+" out.txt | awk '{print $2}')

"$YARD" submit --no-wait --replicas 2 --replica CPU=1,trainer=1 --priority 5 -- sh -c 'echo high job ran; sleep 3' > high.txt
high=$(cat high.txt)
echo "low job $low, high job $high"
at=$(await_queue_stop "$pid")
deadline=$((SECONDS + 120))
until "$YARD" logs "$high" 2>/dev/null | grep -q "high job ran"; do
  if [ $SECONDS -gt $deadline ]; then "$YARD" jobs; echo "the high-priority job did not run"; exit 1; fi
  sleep 0.2
done
await_resume_at "$pid" "$at"
await_job "$pid"
pid=""
grep -q "^epoch 4/4  steps" out.txt
grep -q "^attempt 2 of this job: continuing the run" out.txt
"$YARD" jobs --json > jobs.json
python3 - "$low" "$high" jobs.json railway-out/metrics.jsonl <<'PY'
import json, sys
low, high, path, metrics = sys.argv[1:5]
jobs = {j["job_id"]: j for j in json.load(open(path))}
note = jobs[low].get("preempted", "")
assert note.startswith("stopped at MIN for " + high), jobs[low]
assert jobs[low]["status"] == "SUCCEEDED", jobs[low]
assert jobs[high]["status"] == "SUCCEEDED", jobs[high]
lines = [json.loads(l) for l in open(metrics)]
rec = [r for r in lines if r.get("event") == "recovery"]
assert len(rec) == 1 and "stopped by the job queue" in rec[0]["lost"] and rec[0]["asked"], rec
assert rec[0]["steps_redone"] == 0, rec
epochs = [r["epoch"] for r in lines if r.get("event") == "epoch"]
assert epochs == [1, 2, 3, 4], epochs
print(low, "preempted:", note, "| steps redone after the requeue:", rec[0]["steps_redone"])
PY
echo "train requeue: ok"
