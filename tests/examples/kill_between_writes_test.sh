#!/usr/bin/env bash
# A run killed at each of its writes (strace stops it with SIGKILL at the
# rename that would put a checkpoint or a metrics CSV in place) resumes to
# exactly the state of an uninterrupted run: the same weights, optimizer,
# random state and metrics rows, and no temporary file left behind.
set -euo pipefail
source "$(dirname "$0")/expect.sh"
cnn=$(realpath "$1") same_state=$(realpath "$2")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
command -v strace > /dev/null || skip_test "strace is not installed (Debian package strace)"
strace -qq -o /dev/null true 2> /dev/null || skip_test "strace cannot trace here (ptrace not permitted)"
tiny=(--epochs 2 --max-steps-per-epoch 3 --batch-size 32 --workers 1 --width 4)
"$cnn" "${tiny[@]}" --checkpoint straight.safetensors --metrics straight.csv > straight.log

# The renames of a two-epoch run, in order: checkpoint 1, CSV 1, checkpoint 2, CSV 2.
for n in 1 2 3 4; do
  status=0
  strace -f -qq -o /dev/null -e trace=rename -e inject=rename:signal=KILL:when=$n \
    "$cnn" "${tiny[@]}" --checkpoint k$n.safetensors --metrics k$n.csv > k$n.log 2>&1 || status=$?
  [ "$status" = 137 ] || { echo "FAIL: run $n was not killed (status $status)"; cat k$n.log; exit 1; }
  rows=$( [ -f k$n.csv ] && tail -n +2 k$n.csv | wc -l || echo none)
  expected=(x none none 1 1)  # what the CSV holds when the kill lands: e.g. at 4, checkpoint 2 is in but CSV 2 is not
  [ "$rows" = "${expected[n]}" ] || { echo "FAIL: after kill $n the CSV has $rows rows, expected ${expected[n]}"; exit 1; }
  # stdout is line-buffered even into a file: the killed run's last lines are there.
  [ $n != 4 ] || grep -q "^epoch 2 " k$n.log || { echo "FAIL: the killed run lost its output"; cat k$n.log; exit 1; }
  resume=()
  [ -f k$n.safetensors ] && resume=(--resume)  # killed before the first checkpoint: start again
  "$cnn" "${tiny[@]}" --checkpoint k$n.safetensors --metrics k$n.csv "${resume[@]}" > r$n.log 2>&1 \
    || { echo "FAIL: resuming after kill $n"; cat r$n.log; exit 1; }
  python3 "$same_state" straight.safetensors k$n.safetensors straight.csv k$n.csv \
    || { echo "FAIL: after kill $n"; cat k$n.csv; exit 1; }
done
leftovers=$(ls | grep -- '\.tmp-' || true)
[ -z "$leftovers" ] || { echo "FAIL: temporaries left behind: $leftovers"; exit 1; }
echo PASS
