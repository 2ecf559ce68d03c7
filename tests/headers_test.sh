#!/usr/bin/env bash
# Every installed public header compiles alone (one translation unit each), against the installed
# include tree and the system's headers only: no installed header includes a private one.
set -euo pipefail
BUILD=$(cd "$1" && pwd)
TMP=$(mktemp -d /tmp/yard-headers-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
meson install -C "$BUILD" --no-rebuild --quiet --destdir "$TMP/root" > "$TMP/install.log"
INC=$(find "$TMP/root" -type d -name include -path '*/include' | head -1)
[ -f "$INC/yard/yard.h" ] || { echo "FAIL: no yard/yard.h under the installed tree"; exit 1; }
cd "$INC"
find yard -name '*.h' | sort > "$TMP/headers"
n=$(wc -l < "$TMP/headers")
[ "$n" -ge 14 ] || { echo "FAIL: only $n headers installed"; cat "$TMP/headers"; exit 1; }
compile() {
  printf '#include <%s>\n#include <%s>\n' "$1" "$1" > "$2/$(echo "$1" | tr / _).cc"
  g++ -std=c++20 -fsyntax-only -Wall -Wextra -Werror -Wno-unused-parameter -DMSGPACK_NO_BOOST -I"$INC" \
      -isystem /usr/include/torch/csrc/api/include "$2/$(echo "$1" | tr / _).cc" 2>&1 ||
    { echo "FAIL: $1 does not compile alone"; return 1; }
}
export -f compile
export INC
xargs -P 2 -I{} bash -c 'compile {} '"$TMP" < "$TMP/headers"
echo "PASS: $n installed headers each compile alone"
