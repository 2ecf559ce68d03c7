# Shared by the shell tests (source it). Each helper fails the test with the job's output when
# what it waits for does not happen within 300 s.

# The pids of the daemons (head, node managers) and of the Redis servers started under $YARD_HOME.
daemon_pids() {
  for f in "$YARD_HOME"/clusters/*.json; do
    [ -f "$f" ] && python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$f"
  done
  # The head's node manager (a process of its own beside the head service).
  for f in "$YARD_HOME"/session-*/head-node.pid; do
    [ -f "$f" ] && cat "$f"
  done
}
redis_pids() {
  for f in "$YARD_HOME"/session-*/redis.address "$YARD_HOME"/session-*/redis.pids; do
    [ -f "$f" ] && awk '$1 ~ /^[0-9]+$/ {print $1} $2 ~ /^[0-9]+$/ {print $2}' "$f"
  done
}

# A job ($pid) and a cluster under a fresh $YARD_HOME, made for a test and removed with everything
# it started when the test ends, however it ends: `start_test_home NAME` then `trap end_test_home EXIT`.
start_test_home() {
  export YARD_HOME=$(mktemp -d "/tmp/yard-$1-XXXXXX")
  unset YARD_ADDRESS YARD_TOKEN
  pid=""
}
end_test_home() {
  set +e
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
  for p in $(daemon_pids); do kill "$p" 2>/dev/null; done
  sleep 1
  for p in $(daemon_pids) $(redis_pids); do kill -9 "$p" 2>/dev/null; done
  rm -rf "$YARD_HOME"
}

# await_first_epoch PID: until the railway job PID (output in out.txt) has finished its first
# epoch (of any number) and written a checkpoint.
await_first_epoch() {
  local deadline=$((SECONDS + 300))
  until grep -q "epoch 1/[0-9]*  steps" out.txt && ls railway-out/checkpoints/run-*/ckpt-*.bin > /dev/null 2>&1; do
    if ! kill -0 "$1" 2>/dev/null || [ $SECONDS -gt $deadline ]; then cat out.txt; echo "no first epoch"; exit 1; fi
    sleep 0.2
  done
}

# await_job PID: waits for the job PID to end, prints its output (out.txt) and fails unless it
# exited 0.
await_job() {
  local deadline=$((SECONDS + 300)) rc=0
  while kill -0 "$1" 2>/dev/null; do
    if [ $SECONDS -gt $deadline ]; then cat out.txt; echo "the job did not finish"; exit 1; fi
    sleep 0.2
  done
  wait "$1" || rc=$?
  cat out.txt
  test $rc -eq 0
}

# await_line PID REGEX: until the job PID's output (out.txt) has a line matching REGEX (extended);
# prints that line. Polls every 50 ms: short phases are held open for a second or two at most.
await_line() {
  local deadline=$((SECONDS + 300)) line
  until line=$(grep -m1 -E "$2" out.txt); do
    if ! kill -0 "$1" 2>/dev/null || [ $SECONDS -gt $deadline ]; then cat out.txt >&2; echo "no line matching: $2" >&2; exit 1; fi
    sleep 0.05
  done
  echo "$line"
}

# The job-queue tests' cluster ($YARD must be set): `start_trainer_cluster N [HEAD OPTIONS...]`
# starts a head of 2 CPUs and N nodes of one trainer slot each and exports YARD_ADDRESS and
# YARD_TOKEN; `start_trainer_node` adds one more node.
start_trainer_cluster() {
  local n=$1
  shift
  export YARD_ADDRESS=$("$YARD" start --head --port 0 --num-cpus 2 --heartbeat-timeout 2 "$@" | awk '/started at/ {print $5; exit}')
  export YARD_TOKEN=$(cat "$YARD_HOME"/session-*/token)
  for ((k = 0; k < n; k++)); do start_trainer_node; done
}
start_trainer_node() {
  "$YARD" start --address "$YARD_ADDRESS" --num-cpus 1 --resources '{"trainer": 1}' --heartbeat-timeout 2 > /dev/null
}

# await_queue_stop PID: until the railway job PID stopped for the job queue, its checkpoint
# committed; prints the global step it stopped at (use it as `at=$(await_queue_stop "$pid")`).
await_queue_stop() {
  local line
  line=$(await_line "$1" "^railway-train: stopped for the job queue at global step")
  echo "$line" >&2
  [[ "$line" == *"checkpoint committed"* ]] || { echo "the job stopped without committing its checkpoint" >&2; return 1; }
  echo "$line" | sed -E 's/.*global step ([0-9]+).*/\1/'
}

# await_resume_at PID STEP: until the railway job PID resumed its run, at global step STEP.
await_resume_at() {
  local line
  line=$(await_line "$1" "^resumed run .* \(global step [0-9]+\)")
  echo "$line"
  [[ "$line" == *"(global step $2)" ]] || { echo "resumed elsewhere than step $2" >&2; return 1; }
}
