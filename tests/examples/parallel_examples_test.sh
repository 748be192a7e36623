#!/usr/bin/env bash
# The DataParallel and DistributedDataParallel examples run end to end on
# tiny settings (DDP under mpirun with two ranks) and end with their RESULT
# line; a batch that does not split over the ranks is a clear error.
set -euo pipefail
dp=$(realpath "$1") ddp=$(realpath "$2")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
export TMPDIR=/tmp  # Open MPI's session sockets need a short path
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tiny=(--epochs 1 --max-steps-per-epoch 3 --width 4 --workers 1)

"$dp" "${tiny[@]}" --batch-size 64 --replicas 2 > dp.log 2>&1 || { cat dp.log; exit 1; }
grep -q '^RESULT {"example": "dp_fashion_mnist"' dp.log || { echo "dp: no RESULT line"; cat dp.log; exit 1; }

mpirun -np 2 --oversubscribe --bind-to none "$ddp" "${tiny[@]}" --batch-size 64 > ddp.log 2>&1 || { cat ddp.log; exit 1; }
grep -q '^RESULT {"example": "ddp_fashion_mnist".*"ranks": 2}' ddp.log || { echo "ddp: no RESULT line"; cat ddp.log; exit 1; }
[ "$(grep -c '^RESULT' ddp.log)" = 1 ] || { echo "ddp: only rank 0 should print RESULT"; cat ddp.log; exit 1; }
[ -f ddp_fashion_mnist.safetensors ] || { echo "ddp: rank 0 wrote no checkpoint"; exit 1; }

if mpirun -np 2 --oversubscribe --bind-to none "$ddp" "${tiny[@]}" --batch-size 63 > odd.log 2>&1; then
  echo "ddp: --batch-size 63 over 2 ranks should fail"; cat odd.log; exit 1
fi
grep -q "does not split evenly over 2 ranks" odd.log || { echo "ddp: unclear error"; cat odd.log; exit 1; }
echo PASS
