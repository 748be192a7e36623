#!/usr/bin/env bash
# Ranks of one mpirun job started with different settings, or one of them
# with a bad flag: the job ends in seconds, not after the communication
# timeout, and says which flag differs and what each rank had.
set -euo pipefail
source "$(dirname "$0")/expect.sh"
ddp=$(realpath "$1") pipe=$(realpath "$2")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
export TMPDIR=/tmp  # Open MPI's session sockets need a short path
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LOOM_COMM_TIMEOUT_SECONDS=300  # a hang would take minutes; the checks below allow 30 s
tiny=(--max-steps-per-epoch 2 --width 2)  # mismatched jobs stop before training

# Two ranks of the same program, each with its own extra flags: two_ranks NAME PROGRAM "RANK0 FLAGS" "RANK1 FLAGS".
two_ranks() {
  local name=$1 program=$2 start status=0
  start=$(date +%s)
  # shellcheck disable=SC2086
  timeout 60 mpirun -np 1 --oversubscribe --bind-to none "$program" "${tiny[@]}" --checkpoint "$name.0.st" $3 \
    : -np 1 --oversubscribe --bind-to none "$program" "${tiny[@]}" --checkpoint "$name.1.st" $4 > "$name.log" 2>&1 \
    || status=$?
  local seconds=$(( $(date +%s) - start ))
  [ "$status" != 0 ] && [ "$status" != 124 ] || { echo "FAIL $name: status $status"; cat "$name.log"; exit 1; }
  [ "$seconds" -le 30 ] || { echo "FAIL $name: took $seconds s"; cat "$name.log"; exit 1; }
}
expect_in() {  # expect_in NAME TEXT: the job's output says TEXT
  grep -qF -- "$2" "$1.log" || { echo "FAIL $1: no '$2' in:"; cat "$1.log"; exit 1; }
}

two_ranks lr "$ddp" "--lr 0.001" "--lr 0.01"
expect_in lr "the ranks were started with different settings: --lr (rank 0: 0.001, rank 1: 0.01)"
two_ranks seed "$ddp" "--seed 1" "--seed 2"
expect_in seed "--seed (rank 0: 1, rank 1: 2)"
two_ranks batch "$ddp" "--batch-size 64" "--batch-size 32"
expect_in batch "--batch-size (rank 0: 64, rank 1: 32)"
! grep -q "elements" batch.log || { echo "FAIL batch: a collective failed before the check"; cat batch.log; exit 1; }
two_ranks epochs "$pipe" "--epochs 2" "--epochs 1"
expect_in epochs "--epochs (rank 0: 2, rank 1: 1)"
two_ranks schedule "$pipe" "--schedule gpipe" "--schedule 1f1b"
expect_in schedule "--schedule (rank 0: gpipe, rank 1: 1f1b)"
# A rank that cannot even parse its flags ends the job at once.
two_ranks typo "$ddp" "" "--bogus"
expect_in typo "ddp_fashion_mnist (rank 1): The following argument was not expected: --bogus"
two_ranks bad_value "$pipe" "--micro-batches 0" ""
expect_in bad_value "pipeline_fashion_mnist (rank 0): --micro-batches: expected an integer from 1"
# Per-rank settings (files, workers) may differ: the same job trains.
mpirun -np 1 --oversubscribe --bind-to none "$ddp" "${tiny[@]}" --epochs 1 --workers 1 --log-every 1 --metrics a.csv \
  : -np 1 --oversubscribe --bind-to none "$ddp" "${tiny[@]}" --epochs 1 --workers 0 --log-every 2 --metrics b.csv > fine.log 2>&1 \
  || { echo "FAIL: per-rank flags were refused"; cat fine.log; exit 1; }
echo PASS
