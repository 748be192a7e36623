#!/usr/bin/env bash
# The planner's memory checked against measurement (issue #39, item 2): for
# the mlp, cnn and gpt models, bench/plan predicts each strategy's peak
# memory on 2 ranks of this machine, compare_parallel measures it (as threads
# of one process, then as mpirun's processes), and every strategy's
# prediction must be within 15% of the measurement (tests/bench/plan_check.py
# says what is compared). Where mpirun cannot start two ranks here, that part
# is skipped with a message. The pipelines are checked where compare_parallel
# cuts them (where its timings balance) and, for the cnn, at two cuts pinned
# by --stage-boundaries: after the first convolution (the second stage begins
# with a ReLU, which would free its input) and after its ReLU.
set -euo pipefail
plan=$(realpath "$1")
compare=$(realpath "$2")
check=$(realpath "$3")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
export OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Plans for the pipeline compare_parallel cut (where its timings of the
# children balance, which the machine's noise moves, or where
# --stage-boundaries asked), then checks.
plan_and_check() {  # name, measured file, threads|mpirun, strategies, the model's flags...
  local name=$1 measured=$2 mode=$3 strategies=$4
  shift 4
  local cut
  cut=$(sed -n 's/^pipeline stages begin at children \([0-9,]*\) .*/\1/p' "$measured")
  "$plan" "$@" --cluster 2xcpu --strategies "$strategies" ${cut:+--stage-boundaries "$cut"} --json \
    > "$measured.plan" 2> "$measured.plan.err" || { cat "$measured.plan.err"; exit 1; }
  echo "== $name, $mode${cut:+ (pipeline stages from child $cut)}"
  python3 "$check" "$measured.plan" "$measured" "$mode" || failed=1
}

run_model() {  # name, strategies, compare_parallel's own flags (one word, may be empty), the model's flags...
  local name=$1 strategies=$2 own=$3
  shift 3
  "$compare" "$@" $own --devices 2 --steps 2 --warmup 1 --micro-batches 8 --strategies "$strategies" --out "$name" \
    > "$name.threads" 2>&1 || { cat "$name.threads"; exit 1; }
  plan_and_check "$name" "$name.threads" threads "$strategies" "$@"
  if [ "$mpi" = 1 ]; then
    mpirun -np 2 --oversubscribe --bind-to none "$compare" "$@" $own --steps 2 --warmup 1 --micro-batches 8 \
      --strategies "$strategies" --out "$name.mpi" > "$name.mpirun" 2>&1 || { cat "$name.mpirun"; exit 1; }
    plan_and_check "$name" "$name.mpirun" mpirun "$strategies" "$@"
  fi
}

mpi=1
if ! mpirun -np 2 --oversubscribe --bind-to none true > /dev/null 2>&1; then
  echo "SKIP (mpirun part): mpirun cannot start 2 ranks on this machine"
  mpi=0
fi
failed=0
run_model mlp single,ddp,zero1,zero2,fsdp,gpipe,1f1b "" --model mlp --mlp-hidden 256 --mlp-layers 6 --mlp-batch 256
run_model cnn single,ddp,zero1,zero2,fsdp,gpipe,1f1b "" --model cnn
run_model cnn-cut1 gpipe,1f1b --stage-boundaries=1 --model cnn
run_model cnn-cut2 gpipe,1f1b --stage-boundaries=2 --model cnn
run_model gpt single,ddp,zero1,zero2,fsdp,tp,tp-sp,cp "" --model gpt
exit $failed
