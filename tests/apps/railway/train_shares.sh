#!/usr/bin/env bash
# Batch shares by speed: an elastic railway job of two trainers on two trainer nodes, one of them
# twice as slow per sample (RAILWAY_TRAIN_SLOW_RANK=1:1). Each step's global batch stays at
# 2 x --batch, the slower trainer's part of it shrinks within a few steps so that neither waits
# long for the other, every sample is still seen once per epoch, and the job finishes. The same
# job with --batch-shares equal keeps equal parts, and its fast trainer waits for the slow one.
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
YARD=$(readlink -f "$1")
TRAIN=$(readlink -f "$2")
start_test_home train-shares
trap end_test_home EXIT
# The trainers' processes read it where the nodes start them.
export RAILWAY_TRAIN_SLOW_RANK=1:1
start_trainer_cluster 2
mkdir -p "$YARD_HOME/work"
cd "$YARD_HOME/work"
run() {  # run OUT SHARES
  "$YARD" submit -- "$TRAIN" --epochs 2 --workers 2:2 --batch-shares "$2" \
    --trainer-resources '{"CPU": 1, "trainer": 1}' --logs 1 --length-km 8 --batch 16 --out "$1" \
    --data "$YARD_HOME/work/data" > out.txt 2>&1 &
  pid=$!
  await_job "$pid" > /dev/null
  pid=""
  grep -q "^epoch 2/2  steps" out.txt
}
run speed speed
run equal equal
python3 - speed/steps.jsonl equal/steps.jsonl <<'PY'
import json, statistics, sys
def steps(path):
    return [json.loads(l) for l in open(path)]
speed, equal = steps(sys.argv[1]), steps(sys.argv[2])
for run in (speed, equal):
    assert all(len(s["shares"]) == 2 and sum(s["shares"]) == s["samples"] for s in run), run[:3]
    # Every step but an epoch's last takes the whole global batch.
    for e in (1, 2):
        ep = [s for s in run if s["epoch"] == e]
        assert all(s["samples"] == 32 for s in ep[:-1]), ep
# Every sample once per epoch, whatever the shares: both runs' epochs are equally long.
for e in (1, 2):
    assert sum(s["samples"] for s in speed if s["epoch"] == e) == sum(s["samples"] for s in equal if s["epoch"] == e)
late = lambda run: [s for s in run[10:] if s["samples"] == 32]
slow_share = statistics.median(s["shares"][1] for s in late(speed))
assert all(s["shares"] == [16, 16] for s in late(equal)), late(equal)[:3]
# Twice as slow: 32 / 3 ~ 11 samples at the balance; equal shares give it 16.
assert slow_share <= 13, [s["shares"] for s in speed]
assert slow_share >= 6, [s["shares"] for s in speed]
# The fast trainer waits for the slow one with equal parts, much less with balanced ones.
wait_fast = lambda run: statistics.median(s["wait_s"][0] for s in late(run))
assert wait_fast(speed) < 0.6 * wait_fast(equal), (wait_fast(speed), wait_fast(equal))
print(f"slow trainer's median share {slow_share} of 32; fast trainer's median wait {wait_fast(speed)*1e3:.1f} ms "
      f"balanced, {wait_fast(equal)*1e3:.1f} ms equal")
PY
echo "train shares: ok"
