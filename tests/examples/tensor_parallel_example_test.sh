#!/usr/bin/env bash
# char_gpt in tensor parallel (mpirun -np 2 --tp 2) trains the same model as
# on one process: the fortunes vocabulary (114) splits evenly over two ranks,
# so the validation loss agrees up to float32 rounding and the sample is the
# same text; only rank 0 prints. Four ranks pad the vocabulary and train.
# Under bfloat16 or float16 autocast the ranks' partial products are rounded
# before they are summed, so the loss only stays close (within 2%); fp16's
# loss scaler decides on skipping over all ranks (ShardedGradScaler). With
# --sequence-parallel, and on a 2 x 2 mesh (--dp 2 --tp 2: two replicas,
# each on half of every batch), the model is still the same: the same loss
# and sample; so does context parallelism on a 2 x 2 mesh (--dp 2 --cp 2:
# each rank on half of its replica's sequences), and so does ring attention
# (--cp 2 --cp-exchange ring: the keys and values passed round the ranks),
# and Ulysses (--cp-exchange all-to-all: half the heads each, whole sequences),
# and so do context and tensor parallelism together (--cp 2 --tp 2).
# --dp x --tp x --cp that
# differs from the number of processes is a clear error, and so is
# --sequence-parallel with --cp.
set -euo pipefail
gpt=$(realpath "$1")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
export TMPDIR=/tmp  # Open MPI's session sockets need a short path
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tiny=(--steps 20 --eval-every 20 --sample 60 --batch-size 8)

"$gpt" "${tiny[@]}" --metrics one.csv > one.log 2>&1 || { cat one.log; exit 1; }
mpirun -np 2 --oversubscribe --bind-to none "$gpt" "${tiny[@]}" --tp 2 --metrics tp.csv > tp.log 2>&1 \
  || { cat tp.log; exit 1; }
[ "$(grep -c '^RESULT' tp.log)" = 1 ] || { echo "only rank 0 should print RESULT"; cat tp.log; exit 1; }
grep -q "tensor parallel over 2 ranks" tp.log || { cat tp.log; exit 1; }
same_model() {  # one.log against $1, named $2
  python3 - one.log "$1" "$2" <<'PY'
import json, sys
def run(path):
    text = open(path, errors="replace").read()  # a sample may cut a UTF-8 character
    result = json.loads([l for l in text.splitlines() if l.startswith("RESULT ")][-1][len("RESULT "):])
    return result["val_loss"], text.split("---- sample ----")[1].split("----------------")[0]
(one_loss, one_text), (loss, text) = run(sys.argv[1]), run(sys.argv[2])
assert abs(one_loss - loss) < 1e-3 * one_loss, (one_loss, loss)
assert one_text == text, (one_text, text)
print(f"val loss {one_loss:.6f} on one process, {loss:.6f} {sys.argv[3]}; the same sample")
PY
}
same_model tp.log "in tensor parallel" || exit 1
mpirun -np 2 --oversubscribe --bind-to none "$gpt" "${tiny[@]}" --tp 2 --sequence-parallel --metrics sp.csv > sp.log 2>&1 \
  || { cat sp.log; exit 1; }
grep -q "tensor parallel over 2 ranks (sequence parallel)" sp.log || { cat sp.log; exit 1; }
same_model sp.log "sequence parallel" || exit 1
mpirun -np 4 --oversubscribe --bind-to none "$gpt" "${tiny[@]}" --dp 2 --tp 2 --sequence-parallel --metrics mesh.csv \
  > mesh.log 2>&1 || { cat mesh.log; exit 1; }
[ "$(grep -c '^RESULT' mesh.log)" = 1 ] || { echo "only rank 0 should print RESULT"; cat mesh.log; exit 1; }
grep -q "tensor parallel over 2 ranks (sequence parallel), 2 data-parallel replicas" mesh.log || { cat mesh.log; exit 1; }
same_model mesh.log "on a 2 x 2 data x tensor mesh" || exit 1
mpirun -np 4 --oversubscribe --bind-to none "$gpt" "${tiny[@]}" --dp 2 --cp 2 --metrics cp.csv > cp.log 2>&1 \
  || { cat cp.log; exit 1; }
grep -q "context parallel over 2 ranks, 2 data-parallel replicas" cp.log || { cat cp.log; exit 1; }
same_model cp.log "on a 2 x 2 data x context mesh" || exit 1
mpirun -np 2 --oversubscribe --bind-to none "$gpt" "${tiny[@]}" --cp 2 --cp-exchange ring --metrics ring.csv \
  > ring.log 2>&1 || { cat ring.log; exit 1; }
grep -q "context parallel over 2 ranks (ring attention)" ring.log || { cat ring.log; exit 1; }
same_model ring.log "with ring attention over 2 ranks" || exit 1
mpirun -np 2 --oversubscribe --bind-to none "$gpt" "${tiny[@]}" --cp 2 --cp-exchange all-to-all --metrics a2a.csv \
  > a2a.log 2>&1 || { cat a2a.log; exit 1; }
grep -q "context parallel over 2 ranks (Ulysses all-to-all)" a2a.log || { cat a2a.log; exit 1; }
same_model a2a.log "with Ulysses over 2 ranks" || exit 1
mpirun -np 4 --oversubscribe --bind-to none "$gpt" "${tiny[@]}" --cp 2 --tp 2 --cp-exchange ring --metrics cptp.csv \
  > cptp.log 2>&1 || { cat cptp.log; exit 1; }
grep -q "per rank, tensor parallel over 2 ranks, context parallel over 2 ranks (ring attention)" cptp.log \
  || { cat cptp.log; exit 1; }
same_model cptp.log "on a 2 x 2 context x tensor mesh" || exit 1
mpirun -np 4 --oversubscribe --bind-to none "$gpt" --steps 3 --eval-every 3 --sample 10 --tp 4 --metrics tp4.csv \
  > tp4.log 2>&1 || { cat tp4.log; exit 1; }
grep -q '^RESULT {"example": "char_gpt"' tp4.log || { echo "tp 4: no RESULT"; cat tp4.log; exit 1; }
for precision in bf16 fp16; do
  "$gpt" "${tiny[@]}" --precision $precision --metrics one_$precision.csv > one_$precision.log 2>&1 \
    || { cat one_$precision.log; exit 1; }
  # bf16 with the tokens sharded: the gathered product casts under autocast as linear does.
  sp=(); [ $precision = bf16 ] && sp=(--sequence-parallel)
  mpirun -np 2 --oversubscribe --bind-to none "$gpt" "${tiny[@]}" --tp 2 "${sp[@]}" --precision $precision \
    --metrics tp_$precision.csv > tp_$precision.log 2>&1 || { cat tp_$precision.log; exit 1; }
  python3 - one_$precision.log tp_$precision.log $precision <<'PY' || exit 1
import json, sys
def loss(path):
    line = [l for l in open(path, errors="replace").read().splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])["val_loss"]
one, tp = loss(sys.argv[1]), loss(sys.argv[2])
assert abs(one - tp) < 0.02 * one, (one, tp)
print(f"{sys.argv[3]}: val loss {one:.4f} on one process, {tp:.4f} in tensor parallel")
PY
done
if mpirun -np 2 --oversubscribe --bind-to none "$gpt" --steps 1 --tp 3 > bad.log 2>&1; then
  echo "--tp 3 with 2 processes accepted"; exit 1
fi
grep -q "tensor parallelism takes one rank per slice" bad.log || { cat bad.log; exit 1; }
if mpirun -np 2 --oversubscribe --bind-to none "$gpt" --steps 1 --dp 2 --tp 2 > bad.log 2>&1; then
  echo "--dp 2 --tp 2 with 2 processes accepted"; exit 1
fi
grep -q "(mpirun -np 4)" bad.log || { cat bad.log; exit 1; }
if mpirun -np 4 --oversubscribe --bind-to none "$gpt" --steps 1 --tp 2 --cp 2 --sequence-parallel > bad.log 2>&1; then
  echo "--tp 2 --cp 2 --sequence-parallel accepted"; exit 1
fi
grep -q "context parallelism already gives each rank its share of the sequence" bad.log || { cat bad.log; exit 1; }
if "$gpt" --steps 1 --sequence-parallel > bad.log 2>&1; then echo "--sequence-parallel without --tp accepted"; exit 1; fi
grep -q "it needs --tp 2 or more" bad.log || { cat bad.log; exit 1; }
if mpirun -np 2 --oversubscribe --bind-to none "$gpt" --steps 1 --tp 2 --sequence-parallel --block-size 63 > bad.log 2>&1; then
  echo "--block-size 63 over --tp 2 with --sequence-parallel accepted"; exit 1
fi
grep -q "block-size 63 does not split over --tp 2 ranks" bad.log || { cat bad.log; exit 1; }
# Ranks that read different texts stop before training, naming the vocabulary and the text.
mkdir -p other_text && printf 'abc abc abc\n%%\ncab cab\n%%\n' > other_text/tiny
if mpirun -np 1 --oversubscribe --bind-to none "$gpt" --steps 1 --tp 2 --metrics t0.csv \
  : -np 1 --oversubscribe --bind-to none "$gpt" --steps 1 --tp 2 --metrics t1.csv --fortunes other_text > text.log 2>&1; then
  echo "ranks with different texts trained"; cat text.log; exit 1
fi
grep -q "the ranks were started with different settings: the text (--fortunes) (rank 0: " text.log || { cat text.log; exit 1; }
grep -q "the vocabulary (rank 0: 114 characters, " text.log || { cat text.log; exit 1; }
# A check of one mode runs only in that mode: an odd block size is fine without --cp.
"$gpt" --steps 1 --eval-every 1 --sample 0 --batch-size 2 --block-size 7 --metrics odd.csv > odd.log 2>&1 ||
  { echo "--block-size 7 without --cp refused"; cat odd.log; exit 1; }
if mpirun -np 2 --oversubscribe --bind-to none "$gpt" --steps 1 --cp 2 --block-size 6 > bad.log 2>&1; then
  echo "--cp 2 --block-size 6 accepted"; exit 1
fi
grep -q "does not split into two chunks for each of the 2 ranks" bad.log || { cat bad.log; exit 1; }
echo PASS
