#!/usr/bin/env bash
# railway-detect end to end: a small model trained here, then new logs scanned with it. Checks that
# the defects are found within the tolerance, that no truth file is opened without --score, the
# fan-out over the cluster, and the bad inputs (another model's checkpoint, a missing sensor, a
# log with no GNSS at all).
set -euo pipefail
train="$1" detect="$2" sim="$3"
work=$(mktemp -d /tmp/yard-detect-XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$train" --workers 2 --epochs 3 --logs 4 --length-km 15 --out model > train.txt 2>&1 || { cat train.txt; exit 1; }
grep "val F1" train.txt | tail -1
"$sim" --seed 901 --out new --length-km 12 > /dev/null
cp -r new new2

# Without --score, truth files are never opened (every open the process makes is traced).
if command -v strace > /dev/null; then
  strace -f -qq -e trace=open,openat -o opens.txt "$detect" --model model/checkpoints --in new --out found.csv > out.txt 2>&1 ||
    { cat out.txt; exit 1; }
  grep -q 'new/axlebox.csv' opens.txt || { echo "the trace saw no axle-box read"; exit 1; }
  if grep 'truth\.' opens.txt; then echo "a truth file was opened without --score"; exit 1; fi
else
  echo "strace is not installed: the no-truth check is skipped"
fi

"$detect" --model model/checkpoints --in new --out found.csv --geojson found.geojson --score > out.txt 2>&1 || { cat out.txt; exit 1; }
cat out.txt
head -3 found.csv
head -1 found.csv | grep -q '^log,start_chainage_m,end_chainage_m,km_post,offset_m,class,confidence,irregularity_mm,x_m,y_m,lat,lon,degraded$'
test "$(wc -l < found.csv)" -gt 10
python3 - found.geojson <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
assert g["type"] == "FeatureCollection" and len(g["features"]) > 10, g["type"]
lon, lat = g["features"][0]["geometry"]["coordinates"]
assert 40 < lat < 55 and 0 < lon < 20, (lat, lon)
PY
precision=$(sed -n 's/.*precision \([0-9.]*\) (.*/\1/p' out.txt)
recall=$(sed -n 's/.*recall \([0-9.]*\) (.*/\1/p' out.txt)
python3 -c "import sys; p, r = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if p >= 0.5 and r >= 0.5 else 1)" "$precision" "$recall" ||
  { echo "precision $precision, recall $recall: the detector misses what it was trained to find"; exit 1; }

# A log whose axle box recorded nothing for 40 s: the stretch is reported as not scanned, and the
# score leaves it out instead of counting its defects as missed.
cp -r new gap
awk -F, 'NR == 1 || $1 < 150 || $1 > 190' new/axlebox.csv > gap/axlebox.csv
"$detect" --model model/checkpoints --in gap --out gap.csv --score > gap.txt 2>&1 || { cat gap.txt; exit 1; }
grep -q "not scanned: .* (no axle-box data" gap.txt || { cat gap.txt; exit 1; }

# Many logs: one task per log across an embedded cluster, every log's rows in one file.
"$detect" --model model/checkpoints --logs new new2 --out both.csv > many.txt 2>&1 || { cat many.txt; exit 1; }
test "$(grep -c '^new,' both.csv)" -eq "$(grep -c '^new2,' both.csv)"
test "$(grep -c '^new,' both.csv)" -gt 10

# Another model's checkpoint: its weights do not fit the shape it describes.
ckpt=$(ls model/checkpoints/run-*/ckpt-*.bin | head -1)
python3 - "$ckpt" other.bin <<'PY'
import json, struct, sys, zlib
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"YRDCKPT1"
ver, step, n = struct.unpack_from("<IQI", b, 8)
off, blobs = 24, []
for _ in range(n):
    ln, = struct.unpack_from("<I", b, off); name = b[off + 4:off + 4 + ln].decode(); off += 4 + ln
    sz, = struct.unpack_from("<Q", b, off); data = b[off + 8:off + 8 + sz]; off += 8 + sz
    if name == "model_spec":
        j = json.loads(data); j["d_model"] = 32; data = json.dumps(j).encode()
    blobs.append((name, data))
out = b"YRDCKPT1" + struct.pack("<IQI", ver, step, len(blobs))
for name, data in blobs:
    out += struct.pack("<I", len(name)) + name.encode() + struct.pack("<Q", len(data)) + data
open(sys.argv[2], "wb").write(out + struct.pack("<I", zlib.crc32(out)))
PY
if "$detect" --model other.bin --in new > bad.txt 2>&1; then echo "another model's checkpoint was accepted"; exit 1; fi
grep -q "other.bin: the weights do not fit the model it describes (d_model 32" bad.txt || { cat bad.txt; exit 1; }
head -c 1000 "$ckpt" > cut.bin
if "$detect" --model cut.bin --in new > bad.txt 2>&1; then echo "a truncated checkpoint was accepted"; exit 1; fi
grep -q "cut.bin" bad.txt || { cat bad.txt; exit 1; }

# A log without its axle-box accelerometer: nothing to find defects in, said so.
cp -r new noaxle && rm noaxle/axlebox.csv
if "$detect" --model model/checkpoints --in noaxle > bad.txt 2>&1; then echo "a log without axlebox.csv was accepted"; exit 1; fi
grep -q "noaxle/axlebox.csv: missing" bad.txt || { cat bad.txt; exit 1; }
# A log with no GNSS at all: scanned on odometer distance and raw clocks, every row flagged degraded.
cp -r new nognss && rm nognss/gnss.nmea nognss/*_pps.csv nognss/*_time.nmea
"$detect" --model model/checkpoints --in nognss --out degraded.csv > deg.txt 2>&1 || { cat deg.txt; exit 1; }
grep -q "degraded: odometer-only chainage" deg.txt || { cat deg.txt; exit 1; }
test "$(wc -l < degraded.csv)" -gt 1
if grep -v '^log,' degraded.csv | grep -qv ',1$'; then echo "a row of the degraded log is not flagged"; exit 1; fi
echo "detect: ok"
