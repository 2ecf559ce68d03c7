#!/usr/bin/env bash
# kill -9 of a trainer mid-run: the job notices, restarts the group from the latest checkpoint,
# finishes every epoch without anyone stepping in, and ends where the undisturbed job ends.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bin="$1"
work=$(mktemp -d /tmp/yard-train-fault-XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
cd "$work"
"$bin" --epochs 3 --workers 2 --logs 1 --length-km 8 --batch 16 --checkpoint-every 20 > out.txt 2>&1 &
pid=$!
await_first_epoch "$pid"
victim=$(grep "trainer pids:" out.txt | head -1 | awk '{print $4}')
echo "killing trainer $victim"
kill -9 "$victim"
await_job "$pid"
pid=""
grep -q "restarting the group from the latest checkpoint" out.txt
grep -q "resumed at epoch 2" out.txt
grep -q "epoch 3/3" out.txt
# The same quality as without the loss: the same job undisturbed (same data, seed and steps)
# ends at the same validation loss — the checkpoint carries the model, the optimizer, the step
# and the data loader's position, so the resumed run takes the very same steps.
"$bin" --epochs 3 --workers 2 --logs 1 --length-km 8 --batch 16 --checkpoint-every 20 --out clean > clean.txt 2>&1 || { cat clean.txt; exit 1; }
python3 - railway-out/metrics.jsonl clean/metrics.jsonl <<'PY'
import json, sys
faulty, clean = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
print("final validation loss: after the loss %.6f, undisturbed %.6f" % (faulty["val_loss"], clean["val_loss"]))
assert faulty["restarts"] >= 1 and clean["restarts"] == 0
assert abs(faulty["val_loss"] - clean["val_loss"]) <= 1e-3 * clean["val_loss"], "the resumed run ended elsewhere"
PY
echo "train fault: ok"
