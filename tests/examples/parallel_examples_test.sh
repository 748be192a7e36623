#!/usr/bin/env bash
# The DataParallel, DistributedDataParallel and pipeline examples run end to
# end on tiny settings (DDP and a pipeline under mpirun with two ranks) and
# end with their RESULT line; a batch that does not split over the ranks is
# a clear error. The pipelines train exactly as the single-device example.
# The pipeline over ranks resumes exactly; its checkpoint is refused by the
# threads pipeline and by DDP, and DDP's resumes at another world size.
set -euo pipefail
dp=$(realpath "$1") ddp=$(realpath "$2") pipe=$(realpath "$3") single=$(realpath "$4") same_state=$(realpath "$5")
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
# Resume over ranks: the rank with the loss commits every stage's weights and
# optimizer state, so two epochs straight and one, stopped, then resumed end
# in the same training state.
two=(--epochs 2 --max-steps-per-epoch 3 --width 4 --workers 1 --batch-size 64)
mpirun -np 2 --oversubscribe --bind-to none "$pipe" "${two[@]}" --checkpoint straight.st --metrics straight.csv \
  > straight.log 2>&1 || { cat straight.log; exit 1; }
mpirun -np 2 --oversubscribe --bind-to none "$pipe" "${two[@]}" --stop-after-epoch 1 --checkpoint resumed.st \
  --metrics resumed.csv > first.log 2>&1 || { cat first.log; exit 1; }
grep -q "continue with --resume" first.log || { echo "pipeline: no hint to resume"; cat first.log; exit 1; }
cp resumed.st ranks.st
mpirun -np 2 --oversubscribe --bind-to none "$pipe" "${two[@]}" --resume --checkpoint resumed.st --metrics resumed.csv \
  > second.log 2>&1 || { cat second.log; exit 1; }
grep -q "resumed from resumed.st after epoch 1" second.log || { echo "pipeline: did not resume"; cat second.log; exit 1; }
python3 "$same_state" straight.st resumed.st straight.csv resumed.csv || { echo "pipeline: resumed differently"; exit 1; }
# Its file, in a pipeline of threads and in DDP: refused, naming both writers.
if "$pipe" "${two[@]}" --resume --checkpoint ranks.st --metrics threads.csv > threads.log 2>&1; then
  echo "pipeline: the threads pipeline resumed the ranks' checkpoint"; cat threads.log; exit 1
fi
grep -q "checkpoint ranks.st was written by pipeline_fashion_mnist (pipeline over ranks); this run is \
pipeline_fashion_mnist (pipeline, stages as threads)" threads.log || { cat threads.log; exit 1; }
if mpirun -np 2 --oversubscribe --bind-to none "$ddp" "${two[@]}" --resume --checkpoint ranks.st --metrics d.csv \
  > ddp_resume.log 2>&1; then
  echo "ddp: resumed the pipeline's checkpoint"; cat ddp_resume.log; exit 1
fi
grep -q "was written by pipeline_fashion_mnist (pipeline over ranks); this run is ddp_fashion_mnist (ddp)" \
  ddp_resume.log || { cat ddp_resume.log; exit 1; }
# DDP's checkpoint holds the whole state: it resumes at another world size.
mpirun -np 2 --oversubscribe --bind-to none "$ddp" "${two[@]}" --stop-after-epoch 1 --checkpoint ddp2.st \
  --metrics ddp2.csv > ddp2.log 2>&1 || { cat ddp2.log; exit 1; }
"$ddp" "${two[@]}" --resume --checkpoint ddp2.st --metrics ddp2.csv > ddp1.log 2>&1 || { cat ddp1.log; exit 1; }
grep -q "resumed from ddp2.st after epoch 1" ddp1.log && grep -q '^RESULT {"example": "ddp_fashion_mnist".*"ranks": 1}' \
  ddp1.log || { echo "ddp: did not resume at one rank"; cat ddp1.log; exit 1; }
# Over ranks too: rank 0 draws every rank's row.
mpirun -np 2 --oversubscribe --bind-to none "$pipe" "${tiny[@]}" --schedule zb-h1 --timeline > timeline.log 2>&1 \
  || { cat timeline.log; exit 1; }
[ "$(sed -n '/as measured:$/,$p' timeline.log | grep -c '^stage [01]: ')" = 2 ] || { echo "mpirun: no chart"; cat timeline.log; exit 1; }
echo PASS
