#!/usr/bin/env bash
# Switchyard used from another project: `meson install` into a temporary DESTDIR, then, with the
# build tree out of reach (a tmpfs mounted over it in a private mount namespace), the standalone
# example is built against the installed package with meson (pkg-config) and with CMake
# (find_package), and each program runs on an embedded cluster and against a head started with
# the installed `yard`. No installed file may name the build tree.
# Needs root for the mount namespace: skipped (exit 77) with a message otherwise.
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
  echo "SKIP: hiding the build tree needs root and 'unshare -m' (a private mount namespace)"
  exit 77
fi
if [ -z "${YARD_IN_NS:-}" ]; then
  TMP=$(mktemp -d /tmp/yard-install-XXXXXX)
  trap 'rm -rf "$TMP"' EXIT
  meson install -C "$BUILD" --no-rebuild --quiet --destdir "$TMP/root" > "$TMP/install.log"
  PREFIX=$(meson introspect "$BUILD" --buildoptions | python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')
  LIBDIR=$(meson introspect "$BUILD" --buildoptions | python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="libdir"))')
  ROOT=$TMP/root$PREFIX
  # Nothing installed names the build tree (the old compiled-in path to `yard` did). grep reads
  # to the end (no -q), so `strings` never dies of SIGPIPE and pipefail cannot hide a match.
  bad=0
  while IFS= read -r f; do
    if strings "$f" | grep -F "$BUILD" > /dev/null; then echo "FAIL: $f names the build tree $BUILD"; bad=1; fi
  done < <(find "$ROOT" -type f)
  [ $bad -eq 0 ]
  for want in bin/yard bin/railway-train bin/railway-sim bin/railway-align include/yard/yard.h include/yard/collective.h \
              include/yard/collective_torch.h include/yard/actors/trainer.h "$LIBDIR/libyard.so.0" \
              "$LIBDIR/libyard_collective.so.0" "$LIBDIR/libyard_torch.so.0" "$LIBDIR/pkgconfig/switchyard.pc" \
              "$LIBDIR/pkgconfig/switchyard-collective.pc" "$LIBDIR/pkgconfig/switchyard-torch.pc" \
              "$LIBDIR/cmake/Switchyard/SwitchyardConfig.cmake"; do
    [ -e "$ROOT/$want" ] || { echo "FAIL: $want was not installed"; exit 1; }
  done
  # Only public headers: each one compiles alone, against the installed tree alone.
  find "$ROOT/include" -name '*.h' | sort > "$TMP/headers"
  echo "installed headers: $(wc -l < "$TMP/headers")"
  exec env YARD_IN_NS=1 TMP="$TMP" ROOT="$ROOT" LIBDIR="$LIBDIR" unshare -m --propagation private "$0" "$@"
fi

# In the private mount namespace from here on: the build tree is an empty tmpfs.
mount -t tmpfs none "$BUILD"
[ -z "$(ls -A "$BUILD")" ] || { echo "FAIL: the build tree is still visible"; exit 1; }
unset YARD_BIN YARD_ADDRESS YARD_TOKEN
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export YARD_HOME=$TMP/home
export LD_LIBRARY_PATH=$ROOT/$LIBDIR
export PKG_CONFIG_PATH=$ROOT/$LIBDIR/pkgconfig
HEAD_PORT=
# The first trap does not survive the exec above: this one also removes the installed tree.
cleanup() {
  set +e
  [ -n "$HEAD_PORT" ] && "$ROOT/bin/yard" stop --address "127.0.0.1:$HEAD_PORT" > /dev/null 2>&1
  rm -rf "$TMP"
}
trap cleanup EXIT

cp -r "$SRC/examples/standalone" "$TMP/example"
cd "$TMP/example"
meson setup build-meson > meson-setup.log || { cat meson-setup.log; exit 1; }
ninja -C build-meson > ninja.log || { cat ninja.log; exit 1; }
cmake -S . -B build-cmake -DCMAKE_PREFIX_PATH="$ROOT" > cmake.log || { cat cmake.log; exit 1; }
cmake --build build-cmake > cmake-build.log || { cat cmake-build.log; exit 1; }
for exe in build-meson/standalone build-cmake/standalone build-meson/train_step build-cmake/train_step; do
  # (ldd's output held first: grep -q stops reading early, and under pipefail ldd's SIGPIPE would
  # fail the check.)
  libs=$(ldd "$exe")
  if grep -q "not found" <<< "$libs"; then echo "$libs"; exit 1; fi
  grep -q "$ROOT/$LIBDIR/libyard.so.0" <<< "$libs" || { echo "FAIL: $exe does not use the installed libyard"; echo "$libs"; exit 1; }
  # Switchyard's heap is the program's malloc only when the program itself needs jemalloc.
  needed=$(readelf -d "$exe")
  grep -q "NEEDED.*libjemalloc" <<< "$needed" || { echo "FAIL: $exe does not link jemalloc itself"; echo "$needed"; exit 1; }
done

if command -v yard > /dev/null; then echo "FAIL: a yard on PATH ($(command -v yard)) would hide the test's point"; exit 1; fi
echo "== no yard beside the library: a clear error naming where it looked"
mkdir "$TMP/libonly" && cp -a "$ROOT/$LIBDIR"/libyard*.so* "$TMP/libonly/"
if out=$(LD_LIBRARY_PATH=$TMP/libonly timeout 60 build-meson/standalone 2>&1); then echo "FAIL: ran without a yard: $out"; exit 1; fi
echo "$out" | tail -1
grep -q "cannot find the \`yard\` executable: YARD_BIN is not set, and it is not at $(dirname "$TMP")/bin/yard, .* nor on PATH" <<< "$out" ||
  { echo "FAIL: unexpected error: $out"; exit 1; }

echo "== embedded cluster (no YARD_BIN, no yard on PATH)"
for exe in build-meson/standalone build-cmake/standalone; do
  out=$(timeout 120 "$exe")
  echo "$exe: $out"
  grep -q "hello, standalone; tally 1..10 = 55; allreduce 1.5 2.5" <<< "$out"
done

echo "== the training parts (switchyard-torch, Switchyard::torch)"
for exe in build-meson/train_step build-cmake/train_step; do
  libs=$(ldd "$exe")
  grep -q "$ROOT/$LIBDIR/libyard_torch.so.0" <<< "$libs" || { echo "FAIL: $exe does not use the installed libyard_torch"; echo "$libs"; exit 1; }
  echo "$exe: $(timeout 120 "$exe")"
done

echo "== against a head started with the installed yard"
HEAD_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$ROOT/bin/yard" start --head --port "$HEAD_PORT" --num-cpus 2 > head.log
for exe in build-meson/standalone build-cmake/standalone; do
  out=$(YARD_ADDRESS=127.0.0.1:$HEAD_PORT timeout 120 "$exe")
  echo "$exe: $out"
  grep -q "cluster 127.0.0.1:$HEAD_PORT" <<< "$out"
  grep -q "hello, standalone; tally 1..10 = 55" <<< "$out"
done
"$ROOT/bin/yard" stop --address "127.0.0.1:$HEAD_PORT"
HEAD_PORT=
echo "PASS"
