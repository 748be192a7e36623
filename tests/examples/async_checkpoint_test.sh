#!/usr/bin/env bash
# --async-checkpoint: the commits a background thread writes are those of a
# synchronous run, and a run killed (SIGKILL) while one is in flight leaves
# the previous checkpoint loadable, and resumes from it to exactly the state
# of an uninterrupted run: same weights, optimizer, random state and metrics
# rows, no temporary left behind.
#   1. kill -9 from outside while the second save is in flight
#      (LOOM_TEST_ASYNC_CHECKPOINT_DELAY_MS, test-only: the writer waits 3 s
#      before it writes);
#   2. (with strace) SIGKILL at the fsync of epoch 2's temporary, written
#      whole but not yet renamed, on a thread that is not the main one (a
#      resumed run, epoch 1's checkpoint from the run before).
set -euo pipefail
cnn=$(realpath "$1") same_state=$(realpath "$2")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
tiny=(--epochs 2 --max-steps-per-epoch 6 --batch-size 32 --workers 1 --width 4)
fail() { echo "FAIL: $*"; exit 1; }

"$cnn" "${tiny[@]}" --checkpoint straight.st --metrics straight.csv > straight.log 2>&1 || { cat straight.log; fail straight; }
"$cnn" "${tiny[@]}" --async-checkpoint --checkpoint async.st --metrics async.csv > async.log 2>&1 \
  || { cat async.log; fail "the async run"; }
python3 "$same_state" straight.st async.st straight.csv async.csv || fail "the async run ended in another state"

# resumes_exactly NAME: the checkpoint a kill left holds epoch 1; resuming it ends as the uninterrupted run.
resumes_exactly() {
  local name=$1
  "$cnn" "${tiny[@]}" --checkpoint "$name.st" --metrics "$name.csv" --resume > "$name.resumed.log" 2>&1 \
    || { cat "$name.resumed.log"; fail "$name: the checkpoint the kill left does not resume"; }
  grep -q "^resumed from $name.st after epoch 1$" "$name.resumed.log" || { cat "$name.resumed.log"; fail "$name: not epoch 1's"; }
  python3 "$same_state" straight.st "$name.st" straight.csv "$name.csv" || fail "$name: resumed to another state"
}

# 1. kill -9 while the second save waits to write.
LOOM_TEST_ASYNC_CHECKPOINT_DELAY_MS=3000 "$cnn" "${tiny[@]}" --async-checkpoint --checkpoint killed.st \
  --metrics killed.csv > killed.log 2>&1 &
pid=$!
# Epoch 1's commit is in place once its CSV is (the CSV follows it), and epoch
# 2's save starts right after the "epoch 2" line: then it waits 3 s to write.
until [ -f killed.csv ] && grep -q "^epoch 2 " killed.log; do
  kill -0 $pid 2> /dev/null || { cat killed.log; fail "the run ended before the kill"; }
  sleep 0.05
done
sleep 0.5
kill -KILL $pid
status=0
wait $pid || status=$?
[ "$status" = 137 ] || { cat killed.log; fail "kill -9: status $status"; }
grep -q '^RESULT' killed.log && fail "kill -9 came after the end"
resumes_exactly killed

# 2. SIGKILL at the fsync of a save's temporary, written whole but not yet
# renamed, on the background thread. A resumed run (epoch 1's checkpoint in
# place) is traced from after its resume, whose CSV rewrite is the main
# thread's last fsync: the next one is epoch 2's save's, which the delay
# keeps from starting before strace is attached.
if command -v strace > /dev/null && strace -qq -o /dev/null true 2> /dev/null; then
  "$cnn" "${tiny[@]}" --async-checkpoint --stop-after-epoch 1 --checkpoint fsync.st --metrics fsync.csv > fsync.1.log 2>&1 \
    || { cat fsync.1.log; fail "fsync: epoch 1"; }
  LOOM_TEST_ASYNC_CHECKPOINT_DELAY_MS=2000 "$cnn" "${tiny[@]}" --async-checkpoint --checkpoint fsync.st \
    --metrics fsync.csv --resume > fsync.2.log 2>&1 &
  pid=$!
  until grep -q "^resumed from" fsync.2.log; do
    kill -0 $pid 2> /dev/null || { cat fsync.2.log; fail "fsync: the resumed run ended early"; }
    sleep 0.05
  done
  strace -f -qq -p $pid -o fsync.trace -e trace=fsync -e inject=fsync:signal=KILL:when=1 2> /dev/null || true
  status=0
  wait $pid || status=$?
  [ "$status" = 137 ] || { cat fsync.2.log; fail "fsync kill: status $status"; }
  writer=$(awk '/fsync\(/ { print $1; exit }' fsync.trace)
  [ -n "$writer" ] && [ "$writer" != "$pid" ] || { cat fsync.trace; fail "the fsync killed was not a background thread's"; }
  ls | grep -q -- '^fsync\.st\.tmp-' || { ls; fail "no temporary of the killed write"; }
  resumes_exactly fsync
else
  echo "strace unavailable: the fsync kill is skipped"
fi
leftovers=$(ls | grep -- '\.tmp-' || true)
[ -z "$leftovers" ] || fail "temporaries left behind: $leftovers"
echo PASS
