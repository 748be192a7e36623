#!/usr/bin/env bash
# Beyond one machine: two hosts (network namespaces joined by a veth pair,
# tests/examples/two_hosts.sh), Open MPI over TCP between them, one rank per
# host. DDP and the pipeline over ranks train exactly as with both ranks on
# one host; a link cut mid-training ends the job with loom's timeout error
# on the surviving side, never a hang.
set -euo pipefail
here=$(dirname "$0")
source "$here/expect.sh"
source "$here/two_hosts.sh"
ddp=$(realpath "$1") pipe=$(realpath "$2") same_state=$(realpath "$3")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
two_hosts_available || skip_test "cannot make two hosts here: $TWO_HOSTS_WHY"
export TMPDIR=/tmp  # Open MPI's session sockets need a short path
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One thread per rank either way: a rank alone on its host would otherwise
# take every core, and another thread count sums in another order.
export OMP_NUM_THREADS=1 TWO_HOSTS_ENV=OMP_NUM_THREADS
tiny=(--epochs 1 --max-steps-per-epoch 3 --batch-size 32 --workers 1 --width 4)
one_host() { mpirun -np 2 --oversubscribe --bind-to none "$@"; }

two_hosts_up
for example in ddp pipe; do
  program=${!example}
  one_host "$program" "${tiny[@]}" --checkpoint "$PWD/$example.one.st" --metrics "$PWD/$example.one.csv" \
    > "$example.one.log" 2>&1 || { cat "$example.one.log"; exit 1; }
  run_on_two_hosts "$program" "${tiny[@]}" --checkpoint "$PWD/$example.two.st" --metrics "$PWD/$example.two.csv" \
    > "$example.two.log" 2>&1 || { echo "FAIL: $example over two hosts"; cat "$example.two.log"; exit 1; }
  python3 "$same_state" "$example.one.st" "$example.two.st" "$example.one.csv" "$example.two.csv" \
    || { echo "FAIL: $example trained differently over two hosts"; exit 1; }
done

# Cut the link while the ranks exchange gradients: the surviving rank's
# collective times out (5 s), it says so, and the job ends.
export LOOM_COMM_TIMEOUT_SECONDS=5 TWO_HOSTS_DETECT_SECONDS=10 TWO_HOSTS_TIMEOUT=120
run_on_two_hosts "$ddp" --epochs 100 --batch-size 32 --workers 1 --width 4 --log-every 1 \
  --checkpoint "$PWD/cut.st" --metrics "$PWD/cut.csv" > cut.log 2>&1 &
job=$!
for _ in $(seq 600); do grep -q "step 5/" cut.log && break; sleep 0.1; done
grep -q "step 5/" cut.log || { echo "FAIL: training did not start"; tail -c 2000 cut.log; exit 1; }
cut_link
cut=$(date +%s)
status=0
wait "$job" || status=$?
seconds=$(( $(date +%s) - cut ))
[ "$status" != 0 ] || { echo "FAIL: the job succeeded with its link cut"; tail -c 2000 cut.log; exit 1; }
[ "$status" != 124 ] && [ "$status" != 137 ] || { echo "FAIL: the job hung until killed"; tail -c 2000 cut.log; exit 1; }
grep -q "ddp_fashion_mnist (rank 0): rank 0: all_reduce .* did not complete within 5 s" cut.log \
  || { echo "FAIL: no timeout error from the surviving rank"; tail -c 2000 cut.log; exit 1; }
echo "PASS (the job ended $seconds s after the cut, status $status)"
