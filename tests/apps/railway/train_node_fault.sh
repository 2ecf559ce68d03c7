#!/usr/bin/env bash
# Nodes lost mid-run on a cluster of a head and three nodes. First the node that holds a replica of
# the checkpoints, its disk with it (kill -9 of its node manager; the replica's directory removed):
# the replica restarts elsewhere and the job goes on. Then the node under a trainer: its trainer
# dies with it, the job restarts the group from the latest checkpoint once the node's bundle is
# placed elsewhere, and finishes every epoch. (The replica's loss shows at the next checkpoint
# write, an epoch's end, and an epoch takes about 2 s here, as long as the heartbeat timeout: the
# fourth epoch leaves the trainer's loss time to be noticed before the job would end anyway.)
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
YARD=$(readlink -f "$1")
TRAIN=$(readlink -f "$2")
start_test_home train-node
trap end_test_home EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$YARD" start --head --port "$PORT" --num-cpus 1 --heartbeat-timeout 2 > /dev/null
export YARD_ADDRESS=127.0.0.1:$PORT
export YARD_TOKEN=$(cat "$YARD_HOME"/session-*/token)
for i in 1 2 3; do "$YARD" start --address "$YARD_ADDRESS" --num-cpus 1 --heartbeat-timeout 2 > /dev/null; done
cd "$YARD_HOME"
"$TRAIN" --epochs 4 --workers 2 --logs 1 --length-km 8 --batch 16 --balance 1 --placement STRICT_SPREAD > out.txt 2>&1 &
pid=$!
node_pid() {  # the node manager's pid of a node id
  local addr
  addr=$("$YARD" status --json | python3 -c 'import json,sys; print([n["address"] for n in json.load(sys.stdin)["nodes"] if n["node_id"] == sys.argv[1]][0])' "$1")
  python3 -c '
import json,glob,sys
for f in glob.glob(sys.argv[1] + "/clusters/*.json"):
    r = json.load(open(f))
    if r["address"] == sys.argv[2]: print(r["pid"])' "$YARD_HOME" "$addr"
}
await_first_epoch "$pid"
head_node=$("$YARD" status --json | python3 -c 'import json,sys; print([n["node_id"] for n in json.load(sys.stdin)["nodes"] if n.get("role") == "head"][0])')
# 1. The node of checkpointer replica 1 (the replicas spread: it is not the head's node).
replica_line=$(grep "^checkpoints in .*/replica-1 on node-" out.txt | head -1)
replica_node=$(echo "$replica_line" | awk '{print $5}' | tr -d ,)
replica_dir=$(echo "$replica_line" | awk '{print $3}')
[ -n "$replica_node" ] && [ "$replica_node" != "$head_node" ] || { cat out.txt; echo "replica 1 is not on a joined node"; exit 1; }
echo "killing node $replica_node, which holds checkpointer replica 1, and removing $replica_dir"
kill -9 "$(node_pid "$replica_node")"
rm -rf "$replica_dir"
deadline=$((SECONDS + 120))
until grep -q "^recovered: checkpointer replica 1" out.txt; do
  if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -gt $deadline ]; then cat out.txt; echo "the replica's loss was not reported"; exit 1; fi
  sleep 0.2
done
# 2. A node under a trainer (still alive, not the head's). The trainers may have shared the
# replica's node: then the group restarts without it, and a later "trainer nodes:" line names the
# new members.
live_trainer_node() {
  grep "trainer nodes:" out.txt | tail -1 | tr ' ' '\n' | grep '^node-' | grep -v -e "$head_node" -e "$replica_node" | head -1 || true
}
deadline=$((SECONDS + 120))
until victim_node=$(live_trainer_node) && [ -n "$victim_node" ]; do
  if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -gt $deadline ]; then cat out.txt; echo "no trainer on a live joined node"; exit 1; fi
  sleep 0.2
done
victim_pid=$(node_pid "$victim_node")
echo "killing node $victim_node (node manager pid $victim_pid), which runs a trainer"
kill -9 "$victim_pid"
await_job "$pid"
pid=""
grep -q "restarting the group from the latest checkpoint" out.txt
grep -q "epoch 4/4" out.txt
# The log was aligned on the node that recorded it.
log_node=$(cat railway-data/log-0/NODE)
grep -q "aligning .*/log-0 on $log_node in aligner pid" out.txt
! grep "trainer nodes:" out.txt | tail -1 | grep -q "$victim_node"
echo "train node fault: ok"
