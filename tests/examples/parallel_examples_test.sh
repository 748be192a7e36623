#!/usr/bin/env bash
# The DataParallel, DistributedDataParallel and pipeline examples run end to
# end on tiny settings (DDP and a pipeline under mpirun with two ranks) and
# end with their RESULT line; a batch that does not split over the ranks is
# a clear error. The pipelines train exactly as the single-device example.
set -euo pipefail
dp=$(realpath "$1") ddp=$(realpath "$2") pipe=$(realpath "$3") single=$(realpath "$4")
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
# Pipelines: stages as threads, then one stage per rank; both write traces.
"$single" "${tiny[@]}" --batch-size 64 > single.log 2>&1 || { cat single.log; exit 1; }
"$pipe" "${tiny[@]}" --batch-size 64 --stages 3 --micro-batches 4 --trace threads.json > pipe.log 2>&1 \
  || { cat pipe.log; exit 1; }
# Zero bubble, drawing its last step: one row per stage after the header.
"$pipe" "${tiny[@]}" --batch-size 64 --stages 3 --micro-batches 4 --schedule zb-h1 --timeline --balance time > zb.log 2>&1 \
  || { cat zb.log; exit 1; }
[ "$(sed -n '/as measured:$/,$p' zb.log | grep -c '^stage [012]: ')" = 3 ] || { echo "zb-h1: no chart"; cat zb.log; exit 1; }
grep -q '^cut before layers {[0-9]*, [0-9]*} (by time)$' zb.log || { echo "zb-h1: no timed cuts"; cat zb.log; exit 1; }
# Over ranks, rank 0 times the layers and the others take its cuts.
mpirun -np 2 --oversubscribe --bind-to none "$pipe" "${tiny[@]}" --batch-size 64 --schedule gpipe --balance time --trace ranks.json \
  > mpipe.log 2>&1 || { cat mpipe.log; exit 1; }
[ "$(grep -c '^RESULT' mpipe.log)" = 1 ] || { echo "pipeline: only the last rank should print RESULT"; cat mpipe.log; exit 1; }
for trace in threads.json ranks.rank0.json ranks.rank1.json; do
  python3 -c "import json,sys; d=json.load(open('$trace')); sys.exit(0 if d['traceEvents'] else 1)" \
    || { echo "pipeline: bad trace $trace"; exit 1; }
done
# ZB-V: two chunks a stage in a V, the loss on stage 0 (rank 0 reports);
# with --balance time over ranks, rank 0's measured pass times schedule it.
"$pipe" "${tiny[@]}" --batch-size 64 --stages 2 --micro-batches 4 --schedule zb-v > zbv.log 2>&1 || { cat zbv.log; exit 1; }
mpirun -np 2 --oversubscribe --bind-to none "$pipe" "${tiny[@]}" --batch-size 64 --micro-batches 4 --schedule zb-v \
  --balance time > mzbv.log 2>&1 || { cat mzbv.log; exit 1; }
[ "$(grep -c '^RESULT' mzbv.log)" = 1 ] || { echo "zb-v: only rank 0 should print RESULT"; cat mzbv.log; exit 1; }
grep -q "^zb-v scheduled for the parts' measured pass times$" mzbv.log || { echo "zb-v: not scheduled for the times"; cat mzbv.log; exit 1; }
# Same batches, same weights: the same test loss as one device, up to rounding.
python3 - single.log pipe.log zb.log mpipe.log zbv.log mzbv.log <<'PY' || exit 1
import json, sys
def result(path):
    line = [l for l in open(path) if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])
reference = result(sys.argv[1])
for path in sys.argv[2:]:
    r = result(path)
    if abs(r["test_loss"] - reference["test_loss"]) > 1e-3 or abs(r["test_accuracy"] - reference["test_accuracy"]) > 2e-3:
        sys.exit(f"{path}: {r} differs from the single-device {reference}")
PY
if mpirun -np 2 --oversubscribe --bind-to none "$pipe" "${tiny[@]}" --resume > resume.log 2>&1; then
  echo "pipeline: --resume over ranks should be refused"; cat resume.log; exit 1
fi
grep -q "resume is not supported for a pipeline over ranks" resume.log || { cat resume.log; exit 1; }
# Over ranks too: rank 0 draws every rank's row.
mpirun -np 2 --oversubscribe --bind-to none "$pipe" "${tiny[@]}" --schedule zb-h1 --timeline > timeline.log 2>&1 \
  || { cat timeline.log; exit 1; }
[ "$(sed -n '/as measured:$/,$p' timeline.log | grep -c '^stage [01]: ')" = 2 ] || { echo "mpirun: no chart"; cat timeline.log; exit 1; }
echo PASS
