#!/usr/bin/env bash
# The autoscaler's local provider with network_namespaces: each node it starts runs in a network
# namespace of its own behind a veth pair, reached as another machine; the head listens on an
# address of its own (not loopback), on a veth pair of the host's. Runs the autoscaler test's [.netns] case. Skipped
# (77) without root or `ip netns`.
# Usage: autoscale_netns_test.sh AUTOSCALER_TESTS
set -euo pipefail
tests_bin="$1"
DUMMY=ydh$$
if [ "$(id -u)" != 0 ] || ! command -v ip > /dev/null || ! ip link add "$DUMMY" type veth peer name "${DUMMY}p" 2>/dev/null; then
  echo "SKIP: this test needs root and 'ip' (network namespaces, veth pairs)"
  exit 77
fi
cleanup() {
  ip link del "$DUMMY" 2>/dev/null || true
  # Namespaces the head left behind (it removes its nodes' own when they stop).
  for ns in $(ip netns list 2>/dev/null | awk '/^yard-auto-special-/ {print $1}'); do
    ip netns pids "$ns" | xargs -r kill -9
    ip netns del "$ns"
  done
}
trap cleanup EXIT
HOST=10.214.$(( $$ % 200 + 20 )).1
ip addr add "$HOST/32" dev "$DUMMY"
ip link set "$DUMMY" up
ip link set "${DUMMY}p" up
YARD_TEST_HEAD_HOST=$HOST "$tests_bin" "[.netns]"
