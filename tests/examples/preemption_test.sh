#!/usr/bin/env bash
# A run stopped by a signal finishes its step, commits a checkpoint of that
# step, says so on one line and exits with status 75; --resume then ends
# exactly where an uninterrupted run ends: every tensor, the random state and
# the metrics rows (same_training_state.py), whether the stop fell inside the
# first epoch (no CSV yet) or the second (the CSV holds epoch 1's row).
#
#   preemption_test.sh one-device fashion_mnist_cnn same_training_state.py
#     SIGTERM inside epoch 1; SIGUSR1 (Slurm's --signal=USR1@N) inside epoch 2,
#     with --async-checkpoint (the stop's commit waits for epoch 1's); and
#     SIGTERM that falls on an epoch's end (one step an epoch): the epoch's
#     commit is the stop's.
#   preemption_test.sh ddp ddp_fashion_mnist same_training_state.py   (mpirun -np 2)
#     SIGTERM to rank 1 alone inside epoch 1: rank 0, not signalled, stops
#     after the same step and commits it; SIGTERM to every rank, as Slurm
#     signals a job step's tasks, inside epoch 2 (with --async-checkpoint).
#
# Where the signal lands: the --trace file of steps 3-5 appears after step 5,
# and epoch 1's checkpoint as epoch 2 begins; the signal follows at once. A
# stop that fell on an epoch's end would be a valid stop, but not the case
# under test: the stop's line says it was inside the epoch. The epochs are
# long enough that a slow moment of the machine (tests side by side, a
# background commit's fsync) does not let the epoch end before the signal:
# at 40 steps, about 40 ms, a CI run once missed it and finished the run.
set -euo pipefail
mode=$1 example=$(realpath "$2") same_state=$(realpath "$3")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
export TMPDIR=/tmp  # Open MPI's session sockets need a short path
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
steps=300
run=(--epochs 2 --max-steps-per-epoch $steps --batch-size 32 --workers 1 --width 4)
launcher=()
[ "$mode" = ddp ] && launcher=(mpirun -np 2 --oversubscribe --bind-to none)

fail() { echo "FAIL: $*"; exit 1; }

# The process ids of the ranks mpirun started, in rank order (its children,
# by OMPI_COMM_WORLD_RANK), once both are there; the process itself without
# mpirun. Found before the signal is due: looking them up takes longer than
# a step.
rank_pids() {
  local launched=$1 found=()
  if [ "$mode" != ddp ]; then echo "$launched"; return; fi
  while [ ${#found[@]} -lt 2 ]; do
    kill -0 "$launched" 2> /dev/null || return
    sleep 0.01
    found=()
    for rank in 0 1; do
      for child in $(pgrep -P "$launched"); do
        tr '\0' '\n' < "/proc/$child/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank" && found+=("$child")
      done
    done
  done
  echo "${found[@]}"
}

# Waits until `file` exists; fails if the run ended first.
wait_for() {
  local file=$1 launched=$2
  until [ -e "$file" ]; do
    kill -0 "$launched" 2> /dev/null || { cat "$name.log"; fail "$name: the run ended before $file appeared"; }
    sleep 0.01
  done
}

"${launcher[@]}" "$example" "${run[@]}" --checkpoint straight.st --metrics straight.csv > straight.log 2>&1 \
  || { cat straight.log; fail "the uninterrupted run"; }

# stop_and_resume NAME SIGNAL WHO(all|rank1) EPOCH [FLAG...]: signals the run inside EPOCH, then
# resumes it; both runs get the FLAGs.
stop_and_resume() {
  name=$1
  local signal=$2 who=$3 epoch=$4
  local flags=("${@:5}")
  local trigger=$name.st extra=("${flags[@]}")
  if [ "$epoch" = 1 ]; then
    extra+=(--trace "$name.json")
    trigger=$name.json
    [ "$mode" = ddp ] && trigger=$name.rank0.json
  fi
  "${launcher[@]}" "$example" "${run[@]}" "${extra[@]}" --checkpoint "$name.st" --metrics "$name.csv" > "$name.log" 2>&1 &
  local launched=$! status=0
  local pids=($(rank_pids "$launched"))
  [ "$who" = rank1 ] && pids=("${pids[1]}")
  wait_for "$trigger" "$launched"
  kill -s "$signal" "${pids[@]}"
  wait "$launched" || status=$?
  [ "$status" = 75 ] || { cat "$name.log"; fail "$name: exit status $status, expected 75"; }
  # Under mpirun the progress line is live (a pseudo-terminal): its steps end in \r.
  local said
  said=$(tr '\r' '\n' < "$name.log" | grep '^stopped by' || true)
  local by=SIG$signal
  [ "$who" = rank1 ] && by="another rank's signal"  # rank 0 reports, and it was not signalled
  [[ "$said" =~ ^stopped\ by\ $by\ after\ step\ [0-9]+\ \(epoch\ $epoch:\ [0-9]+\ of\ $steps\ steps\)\;\ checkpoint\ $name.st\ written\;\ exit\ status\ 75\;\ continue\ with\ --resume$ ]] \
    || { cat "$name.log"; fail "$name: the stop's line is '$said'"; }
  ! grep -q "(rank [0-9]*):" "$name.log" || { cat "$name.log"; fail "$name: a rank failed"; }
  # The CSV holds the finished epochs' rows: none inside epoch 1, one inside epoch 2.
  local rows=none
  [ -f "$name.csv" ] && rows=$(tail -n +2 "$name.csv" | wc -l)
  local expected=(x none 1)
  [ "$rows" = "${expected[epoch]}" ] || fail "$name: the CSV has $rows rows after the stop, expected ${expected[epoch]}"
  "${launcher[@]}" "$example" "${run[@]}" "${flags[@]}" --checkpoint "$name.st" --metrics "$name.csv" --resume \
    > "$name.resumed.log" 2>&1 \
    || { cat "$name.resumed.log"; fail "$name: resuming"; }
  grep -q "^resumed from $name.st after step [0-9]* (epoch $epoch: [0-9]* of $steps steps)$" "$name.resumed.log" \
    || { cat "$name.resumed.log"; fail "$name: did not resume mid-epoch"; }
  python3 "$same_state" straight.st "$name.st" straight.csv "$name.csv" || fail "$name: resumed to another state"
  straight=$(grep -o '"test_accuracy": [0-9.]*' straight.log)
  resumed=$(grep -o '"test_accuracy": [0-9.]*' "$name.resumed.log")
  [ "$straight" = "$resumed" ] || fail "$name: accuracy $resumed, uninterrupted $straight"
  echo "$name: $said"
}

if [ "$mode" = ddp ]; then
  stop_and_resume one_rank TERM rank1 1
  stop_and_resume every_rank TERM all 2 --async-checkpoint
else
  stop_and_resume term TERM all 1
  stop_and_resume usr1 USR1 all 2 --async-checkpoint
  # A stop after an epoch's last step is that epoch's own commit: one step an
  # epoch, signalled once epoch 1's checkpoint is in place, stops after epoch 2 or 3.
  short=(--epochs 4 --max-steps-per-epoch 1 --batch-size 32 --workers 1 --width 4)
  "$example" "${short[@]}" --checkpoint short.st --metrics short.csv > short.log 2>&1 || { cat short.log; fail short; }
  "$example" "${short[@]}" --checkpoint edge.st --metrics edge.csv > edge.log 2>&1 &
  launched=$!
  name=edge
  wait_for edge.st $launched
  kill -TERM $launched
  status=0
  wait $launched || status=$?
  [ "$status" = 75 ] || { cat edge.log; fail "edge: exit status $status, expected 75"; }
  grep -q "^stopped by SIGTERM after epoch [23] (step [23]); checkpoint edge.st written; exit status 75; continue with --resume$" \
    edge.log || { cat edge.log; fail "edge: no stop after an epoch"; }
  "$example" "${short[@]}" --checkpoint edge.st --metrics edge.csv --resume > edge.resumed.log 2>&1 \
    || { cat edge.resumed.log; fail "edge: resuming"; }
  grep -q "^resumed from edge.st after epoch [23]$" edge.resumed.log || { cat edge.resumed.log; fail "edge: resumed how?"; }
  python3 "$same_state" short.st edge.st short.csv edge.csv || fail "edge: resumed to another state"
  echo "edge: $(grep '^stopped by' edge.log)"
fi
leftovers=$(ls | grep -- '\.tmp-' || true)
[ -z "$leftovers" ] || fail "temporaries left behind: $leftovers"
echo PASS
