#!/usr/bin/env bash
# What the daemons, libraries, apps, benches and fuzzers use of the runtime is its public headers
# (runtime/include/yard/) and its internal header set (runtime/internal/yard/internal/): none of
# them includes a private header of runtime/src. (Unit tests of a part may include that part's
# private headers; they are not checked here.)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
python3 - <<'PY'
import os, re, sys
private_dirs = ["runtime/src", "runtime/src/transport"]
bad = []
checked = 0
for top in ["scheduler", "collective", "actors", "apps", "bench", "fuzz", "examples"]:
    for dp, _, fs in os.walk(top):
        for fn in fs:
            if not fn.endswith((".cc", ".h")):
                continue
            path = os.path.join(dp, fn)
            for n, line in enumerate(open(path, errors="replace"), 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if not m:
                    continue
                checked += 1
                inc = m.group(1)
                # Resolved within its own part first (its folder, its src/ and include/ trees).
                own = any(os.path.isfile(os.path.join(d, inc)) for d, _, _ in os.walk(top))
                if own or any(os.path.isfile(os.path.join(dp, inc)) for _ in [0]):
                    continue
                if any(os.path.isfile(os.path.join(p, inc)) for p in private_dirs):
                    bad.append(f"{path}:{n}: includes the runtime's private {inc}")
if bad:
    print("FAIL: private runtime headers included outside the runtime (use yard/internal/*.h):")
    print("\n".join(bad))
    sys.exit(1)
print(f"PASS: {checked} includes outside the runtime, none of a private runtime header")
PY
