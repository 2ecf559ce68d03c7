#!/usr/bin/env bash
# The railway training job end to end on an embedded cluster, small: simulate, align (one task per
# log), train 2 workers for 2 epochs, evaluate, checkpoint. Checks what it leaves behind.
set -euo pipefail
bin="$1"
work=$(mktemp -d /tmp/yard-train-smoke-XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
# Pointed at a cluster it cannot use (nothing listens there, no token for it), it says so and exits
# with status 1: no abort.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
set +e
YARD_ADDRESS=127.0.0.1:$port "$bin" --epochs 1 > nocluster.txt 2>&1
code=$?
set -e
[ "$code" = 1 ] || { echo "railway-train without its cluster exited $code:"; cat nocluster.txt; exit 1; }
grep -q "^railway-train: .*127.0.0.1:$port" nocluster.txt || { echo "railway-train did not say why:"; cat nocluster.txt; exit 1; }
"$bin" --epochs 2 --workers 2 --logs 1 --length-km 8 --batch 16 > out.txt 2>&1 || { cat out.txt; exit 1; }
cat out.txt
grep -q "epoch 2/2  steps" out.txt
grep -q "aligning .*log-0 on node-" out.txt
test "$(wc -l < railway-out/metrics.jsonl)" -eq 2
# One line per optimizer step: two epochs of the steps the job announced.
spe=$(sed -n 's/.* \([0-9]*\) steps per epoch$/\1/p' out.txt)
test "$(wc -l < railway-out/steps.jsonl)" -eq $((2 * spe))
grep -q '"loss"' railway-out/steps.jsonl
grep -q '"val_macro_f1"' railway-out/metrics.jsonl
# Each epoch saved a checkpoint: its hand-over time on the training thread is reported.
test "$(grep -c '"checkpoint_stall_ms":[0-9.]*[1-9]' railway-out/metrics.jsonl)" -eq 2
test -s railway-out/curves.svg
# The held-out evaluation as images and per class.
grep -q "<svg" railway-out/confusion.svg
grep -q "<svg" railway-out/precision_recall.svg
grep -q '"val_per_class":{.*"squat":{"precision":' railway-out/metrics.jsonl
grep -q '"val_confusion":\[' railway-out/metrics.jsonl
ls railway-out/checkpoints/run-*/ckpt-*.bin > /dev/null
test -f railway-data/shards-0/manifest.json
# A second run reuses the shards (no recording or aligning), with two micro-batches of 16 per step: a global batch of 32, half
# the steps.
"$bin" --epochs 1 --workers 1 --logs 1 --length-km 8 --batch 16 --accumulate 2 --out again > out2.txt 2>&1 || { cat out2.txt; exit 1; }
grep -q "global batch 32," out2.txt
spe2=$(sed -n 's/.* \([0-9]*\) steps per epoch$/\1/p' out2.txt)
test "$(wc -l < again/steps.jsonl)" -eq "$spe2"
grep -q '"samples":32,' again/steps.jsonl  # a step is both micro-batches
if grep -q "recording\|aligning" out2.txt; then echo "the shards were not reused"; exit 1; fi
# Local SGD: two replicas stepping alone, averaged every 3 steps (and at the epoch's end, before
# the evaluation), train the same job to its end.
"$bin" --epochs 1 --workers 2 --logs 1 --length-km 8 --batch 16 --strategy local-sgd --sync-every 3 --out lsgd > out5.txt 2>&1 ||
  { cat out5.txt; exit 1; }
grep -q "average their weights every 3 steps" out5.txt || { cat out5.txt; exit 1; }
spe5=$(sed -n 's/.* \([0-9]*\) steps per epoch$/\1/p' out5.txt)
test "$(wc -l < lsgd/steps.jsonl)" -eq "$spe5"
grep -q '"val_macro_f1"' lsgd/metrics.jsonl
# Parameter servers, sync: the same training as DDP (without clipping, which DDP applies to the
# global gradient and the servers' workers to their own): every step's loss and the validation
# loss agree. Async reports what each step's gradients missed; ssp:1 never more than a step ahead.
common=(--epochs 1 --workers 2 --logs 1 --length-km 8 --batch 16 --clip 0)
"$bin" "${common[@]}" --out ddp0 > out6.txt 2>&1 || { cat out6.txt; exit 1; }
"$bin" "${common[@]}" --strategy ps --ps-servers 2 --out ps0 > out7.txt 2>&1 || { cat out7.txt; exit 1; }
grep -q "parameter servers: 2 servers hold the weights and the optimizer, mode sync" out7.txt || { cat out7.txt; exit 1; }
grep -q "^parameter server pids: [0-9]* [0-9]*$" out7.txt || { cat out7.txt; exit 1; }
"$bin" "${common[@]}" --strategy ps --ps-mode ssp:1 --out ssp1 > out8.txt 2>&1 || { cat out8.txt; exit 1; }
python3 - ddp0 ps0 ssp1 <<'PY'
import json, sys
steps = lambda d: [json.loads(l) for l in open(d + "/steps.jsonl")]
val = lambda d: [json.loads(l) for l in open(d + "/metrics.jsonl") if '"epoch"' in l][-1]["val_loss"]
ddp, ps, ssp = steps(sys.argv[1]), steps(sys.argv[2]), steps(sys.argv[3])
assert len(ddp) == len(ps) and len(ddp) > 5, (len(ddp), len(ps))
for a, b in zip(ddp, ps):
    assert abs(a["loss"] - b["loss"]) <= 1e-4 * abs(a["loss"]), (a, b)
    assert b["ahead"] == 0 and b["stale_updates"] == 0, b
assert abs(val(sys.argv[1]) - val(sys.argv[2])) <= 1e-4 * val(sys.argv[1])
assert all(s["ahead"] <= 1 for s in ssp), ssp
print("ps sync = ddp over %d steps; ssp:1 at most %d ahead" % (len(ps), max(s["ahead"] for s in ssp)))
PY
# Async: batches on request. With trainer 1 made twice as slow, trainer 0 takes more batches;
# the epoch still sees each of its samples once (its steps' samples add up to DDP's), in as many
# job steps (rounds of one batch per trainer).
RAILWAY_TRAIN_SLOW_RANK=1:1.0 "$bin" "${common[@]}" --strategy ps --ps-mode async --out async0 > out8a.txt 2>&1 ||
  { cat out8a.txt; exit 1; }
grep -q "mode async, batches on request" out8a.txt || { cat out8a.txt; exit 1; }
taken=$(sed -n 's/^batches on request, taken: trainer 0 \([0-9]*\), trainer 1 \([0-9]*\)$/\1 \2/p' out8a.txt)
read -r t0 t1 <<< "$taken"
[ -n "$t1" ] && [ "$t0" -gt "$t1" ] || { cat out8a.txt; echo "the faster trainer did not take more batches: $taken"; exit 1; }
python3 - ddp0 async0 <<'PY'
import json, sys
steps = lambda d: [json.loads(l) for l in open(d + "/steps.jsonl")]
ddp, asy = steps(sys.argv[1]), steps(sys.argv[2])
assert sum(s["samples"] for s in ddp) == sum(s["samples"] for s in asy), "samples differ"
assert len(ddp) == len(asy), (len(ddp), len(asy))
print("async: %d samples in %d steps, as ddp" % (sum(s["samples"] for s in asy), len(asy)))
PY
echo "async batches taken: $taken"
if "$bin" "${common[@]}" --strategy ps --ps-mode ssp:x --out bad > out9.txt 2>&1; then cat out9.txt; echo "a bad mode was accepted"; exit 1; fi
grep -q "'ssp:x' is not a parameter-server mode" out9.txt || { cat out9.txt; exit 1; }
# Pipeline: the encoder's layers over 2 stage trainers (4 micro-batches per batch, 1F1B) train
# as one process on the same batch does; 2 pipelines of 2 stages (hybrid) as DDP over 2 replicas.
# Every step's loss and the validation loss agree to rounding (without clipping, as for the
# parameter servers).
one=(--epochs 1 --logs 1 --length-km 8 --batch 16 --clip 0)
"$bin" "${one[@]}" --workers 1 --out ddp1 > out10.txt 2>&1 || { cat out10.txt; exit 1; }
"$bin" "${common[@]}" --pp 2 --micro-batches 4 --out pipe2 > out11.txt 2>&1 || { cat out11.txt; exit 1; }
grep -q "pipeline: 1 replicas of 2 stages (encoder layers per stage, from measured layer times: 1 | 1), 4 micro-batches" out11.txt ||
  { cat out11.txt; exit 1; }
# Each stage builds only its part: it holds fewer parameters than the whole model's trainer.
whole=$(sed -n 's/^model parameters per trainer: //p' out10.txt)
read -r s0 s1 <<< "$(sed -n 's/^model parameters per trainer: //p' out11.txt)"
[ -n "$whole" ] && [ "$s0" -lt "$whole" ] && [ "$s1" -lt "$whole" ] && [ $((s0 + s1)) -gt "$whole" ] ||
  { cat out10.txt out11.txt; echo "the stages hold $s0 and $s1 of the model's $whole parameters"; exit 1; }
echo "pipeline stages hold $s0 and $s1 of the model's $whole parameters"
"$bin" "${one[@]}" --dp 2 --pp 2 --micro-batches 4 --out hybrid > out12.txt 2>&1 || { cat out12.txt; exit 1; }
grep -q "training on [0-9]* windows with 4 workers, global batch 32," out12.txt || { cat out12.txt; exit 1; }
python3 - ddp1 pipe2 ddp0 hybrid <<'PY'
import json, sys
steps = lambda d: [json.loads(l) for l in open(d + "/steps.jsonl")]
val = lambda d: [json.loads(l) for l in open(d + "/metrics.jsonl") if '"epoch"' in l][-1]["val_loss"]
for ref, run in ((sys.argv[1], sys.argv[2]), (sys.argv[3], sys.argv[4])):
    a, b = steps(ref), steps(run)
    assert len(a) == len(b) and len(a) > 5, (ref, run, len(a), len(b))
    assert all(x["samples"] == y["samples"] for x, y in zip(a, b)), (ref, run)
    worst = max(abs(x["loss"] - y["loss"]) / x["loss"] for x, y in zip(a, b))
    # To rounding: a micro-batch's matrix products round differently from the whole batch's.
    assert worst <= 1e-3, (ref, run, worst)
    rel = abs(val(run) - val(ref)) / val(ref)
    assert rel <= 1e-3, (ref, run, val(ref), val(run))
    print("%s = %s: step losses within %.4f, validation loss within %.4f" % (run, ref, worst, rel))
PY
# An impossible pipeline or parameter-server split is refused before any actor starts, with the reason.
if "$bin" "${one[@]}" --pp 3 --workers 3 --out bad > out13.txt 2>&1; then cat out13.txt; echo "3 stages of 2 layers were accepted"; exit 1; fi
grep -q "3 pipeline stages for a model of 2 layers: a stage would hold no layer" out13.txt || { cat out13.txt; exit 1; }
if "$bin" "${common[@]}" --pp 2 --micro-batches 1 --out bad > out14.txt 2>&1; then cat out14.txt; echo "1 micro-batch for 2 stages was accepted"; exit 1; fi
grep -q "1 micro-batches for 2 pipeline stages: the pipeline would never fill" out14.txt || { cat out14.txt; exit 1; }
if "$bin" "${one[@]}" --pp 2 --workers 3 --out bad > out15.txt 2>&1; then cat out15.txt; echo "3 workers in pipelines of 2 were accepted"; exit 1; fi
grep -q "is not a whole number of pipelines" out15.txt || { cat out15.txt; exit 1; }
if "$bin" "${one[@]}" --strategy ps --ps-servers 40 --out bad > out16.txt 2>&1; then cat out16.txt; echo "40 servers for 33 tensors were accepted"; exit 1; fi
grep -q "parameter servers: 40 servers for 33 parameter tensors: a server would hold nothing" out16.txt || { cat out16.txt; exit 1; }
if grep -q "setting up the trainers" out13.txt out14.txt out15.txt out16.txt; then echo "trainers were started for an impossible pipeline"; exit 1; fi
# An impossible elastic group, or one of another strategy, is refused the same way.
if "$bin" "${one[@]}" --workers 3:2 --out bad > out17.txt 2>&1; then cat out17.txt; echo "--workers 3:2 was accepted"; exit 1; fi
grep -q "wants N or MIN:MAX with 1 <= MIN <= MAX" out17.txt || { cat out17.txt; exit 1; }
if "$bin" "${one[@]}" --workers 1:2 --strategy ps --out bad > out18.txt 2>&1; then cat out18.txt; echo "an elastic ps group was accepted"; exit 1; fi
grep -q "an elastic group (--workers MIN:MAX) trains data parallel" out18.txt || { cat out18.txt; exit 1; }
if "$bin" "${one[@]}" --trainer-resources '{"CPU": "one"}' --out bad > out19.txt 2>&1; then cat out19.txt; echo "bad resources were accepted"; exit 1; fi
grep -q "CPU must be a non-negative number" out19.txt || { cat out19.txt; exit 1; }
# A data directory recorded with other settings is refused, saying what differs; nothing is lost.
if "$bin" --epochs 1 --workers 1 --logs 1 --length-km 9 --out other > out3.txt 2>&1; then cat out3.txt; echo "other settings were accepted"; exit 1; fi
grep -q "log-0 was recorded with --length-km 8 (seed 100), this run asks for --length-km 9" out3.txt || { cat out3.txt; exit 1; }
test -f railway-data/shards-0/manifest.json
# Data an older simulator made (no version in RECORDED.json) is made again, and said so.
python3 - railway-data/log-0/RECORDED.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); j.pop("simulator_version", None); json.dump(j, open(sys.argv[1], "w"))
PY
"$bin" --epochs 1 --workers 1 --logs 1 --length-km 8 --batch 16 --out older > out4.txt 2>&1 || { cat out4.txt; exit 1; }
grep -q "log-0 was recorded by an older simulator (version 1, this is [0-9]*): recording it again" out4.txt || { cat out4.txt; exit 1; }
grep -q '"simulator_version"' railway-data/log-0/RECORDED.json
echo "train smoke: ok"
