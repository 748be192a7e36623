#!/usr/bin/env bash
# Every example, given bad flags, missing or hostile files: a clear message
# naming the flag or file, a non-zero status (2 for a bad command line), in
# seconds, never a crash; and nothing outside its own outputs is touched.
set -euo pipefail
source "$(dirname "$0")/expect.sh"
cnn=$(realpath "$1") dp=$(realpath "$2") ddp=$(realpath "$3") pipe=$(realpath "$4")
gpt=$(realpath "$5") lstm=$(realpath "$6") mlp=$(realpath "$7")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
tiny=(--epochs 1 --max-steps-per-epoch 2 --batch-size 32 --workers 0 --width 2)
mkdir -p folder

# Bad values of every kind of flag, in every example.
expect_failure log_every 2 "--log-every: expected an integer from 1" -- "$cnn" --log-every 0
expect_failure epochs 2 "--epochs: expected an integer from 1 to 100000, got '-1'" -- "$cnn" --epochs -1
expect_failure seed 2 "--seed: expected an integer from 0 to 18446744073709551615, got '-1'" -- "$cnn" --seed -1
expect_failure lr 2 "--lr: expected a finite number" -- "$cnn" --lr nan
expect_failure batch 2 "--batch-size: expected an integer from 1 to 60000" -- "$cnn" --batch-size 99999999999999999999
expect_failure unknown 2 "--bogus" -- "$cnn" --bogus
expect_failure device 2 "--device: invalid device 'gpu'" -- "$cnn" --device gpu
expect_failure stop_after 1 "--stop-after-epoch 3 is after the last epoch" -- "$cnn" --epochs 2 --stop-after-epoch 3
expect_failure replicas 2 "--replicas: expected an integer from 1" -- "$dp" --replicas -1
# A bad device list is a bad command line (status 2, as documented), refused before any data is read;
# an empty item is an invalid device, not one left out; an index is checked as written, never wrapped
# into an int (cuda:99999999999 was once device 1215752191).
expect_failure devices 2 "dp_fashion_mnist: --devices: invalid device '': expected cpu, cuda or cuda:N (see --help)" \
  -- "$dp" --devices ,
expect_failure devices_trailing 2 "dp_fashion_mnist: --devices: invalid device '': expected cpu, cuda or cuda:N" \
  -- "$dp" --devices cpu,
expect_failure devices_empty 2 "dp_fashion_mnist: --devices: invalid device '': expected cpu, cuda or cuda:N" \
  -- "$dp" --devices ""
expect_failure devices_gpu 2 "dp_fashion_mnist: --devices: invalid device 'gpu': expected cpu, cuda or cuda:N" \
  -- "$dp" --devices cpu,gpu
expect_failure devices_index 2 \
  "dp_fashion_mnist: --devices: invalid device 'cuda:99999999999': a CUDA device index is from 0 to 127 (see --help)" \
  -- "$dp" --devices cpu,cuda:99999999999
expect_failure devices_long 2 "dp_fashion_mnist: --devices: a list of at most 256 devices, got 257 (see --help)" \
  -- "$dp" --devices "$(printf 'cpu,%.0s' {1..256})cpu"
expect_failure device_index 2 \
  "fashion_mnist_cnn: --device: invalid device 'cuda:99999999999': a CUDA device index is from 0 to 127 (see --help)" \
  -- "$cnn" --device cuda:99999999999
expect_failure bucket 2 "--bucket-mb: expected an integer from 1" -- "$ddp" --bucket-mb 0
expect_failure stages 2 "--stages: expected an integer from 1 to 8" -- "$pipe" --stages 9
expect_failure chunks 2 "--chunks: expected an integer from 1 to 8" -- "$pipe" --chunks 0
expect_failure parts 1 "the CNN is cut into at most 8 parts (stages x chunks), not 12" -- "$pipe" "${tiny[@]}" \
  --schedule interleaved --stages 4 --chunks 3
expect_failure interleaved 1 "4 micro-batches are not a multiple of the 3 stages" -- "$pipe" "${tiny[@]}" \
  --schedule interleaved --stages 3 --micro-batches 4
expect_failure micro 2 "--micro-batches: expected an integer from 1" -- "$pipe" --micro-batches 0
expect_failure schedule 2 "--schedule" -- "$pipe" --schedule zigzag
expect_failure micro_batch 1 "makes a batch of 32 images, fewer than the 40" -- "$pipe" "${tiny[@]}" --micro-batches 40
expect_failure preset 2 "--preset" -- "$gpt" --preset huge
expect_failure heads 1 "--embd 130 does not split over --heads 4" -- "$gpt" --embd 130 --heads 4
expect_failure dropout 2 "--dropout: expected a finite number from 0 to 0.99" -- "$gpt" --dropout 1
expect_failure eval_every 2 "--eval-every: expected an integer from 1" -- "$gpt" --eval-every 0
expect_failure cp_exchange 2 "--cp-exchange: bogus not in {all-gather,ring,all-to-all}" -- "$gpt" --cp-exchange bogus
expect_failure ring_alone 1 "--cp-exchange ring passes the keys and values between context-parallel ranks: it needs --cp 2" \
  -- "$gpt" --cp-exchange ring
expect_failure hidden 2 "--hidden: expected an integer from 1" -- "$lstm" --hidden 0
expect_failure seq_len 2 "--seq-len: expected an integer from 1" -- "$lstm" --seq-len -5
expect_failure gpt_text 1 "read_fortunes: nowhere not found" -- "$gpt" --fortunes nowhere
expect_failure lstm_text 1 "read_fortunes: nowhere not found" -- "$lstm" --fortunes nowhere
expect_failure points 2 "--points: expected an integer from 1" -- "$mlp" --points 0

# Outputs that cannot be written are found before any training.
expect_failure ckpt_folder 1 "--checkpoint folder: is a folder" -- "$cnn" "${tiny[@]}" --checkpoint folder
expect_failure metrics_missing 1 "--metrics: cannot write missing/m.csv" -- "$cnn" "${tiny[@]}" --metrics missing/m.csv
expect_failure trace_device 1 "--trace /dev/null: is not a regular file" -- "$cnn" "${tiny[@]}" --trace /dev/null
expect_failure gpt_metrics 1 "--metrics folder: is a folder" -- "$gpt" --steps 2 --metrics folder
expect_failure board_proc 1 "SummaryWriter: cannot create the log folder '/proc/loom/runs'" -- \
  "$cnn" "${tiny[@]}" --tensorboard /proc/loom/runs
expect_failure gpt_board 1 "SummaryWriter: cannot create the log folder '/proc/loom/runs'" -- \
  "$gpt" --steps 2 --tensorboard /proc/loom/runs
# Outputs that are one file, or that would replace what the run reads, are refused by both flags before
# anything is read or written (once, --metrics = --checkpoint left a CSV where the checkpoint was).
mkdir -p data_links texts
ln -sf /usr/share/datasets/fashion-mnist/*.gz data_links/
cp /usr/share/games/fortunes/fortunes texts/
expect_failure metrics_is_ckpt 1 "--metrics same and --checkpoint same are one file" -- \
  "$cnn" "${tiny[@]}" --checkpoint same --metrics same
expect_failure trace_is_ckpt 1 "--trace ./same.st and --checkpoint same.st are one file" -- \
  "$cnn" "${tiny[@]}" --checkpoint same.st --trace ./same.st
expect_failure metrics_in_data 1 "--metrics data_links/../data_links/m.csv is inside the folder --data data_links" -- \
  "$cnn" "${tiny[@]}" --data data_links --metrics data_links/../data_links/m.csv
expect_failure metrics_on_data 1 "--metrics /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz would \
replace --data data_links" -- "$cnn" "${tiny[@]}" --data data_links \
  --metrics /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz
expect_failure gpt_metrics_in_text 1 "--metrics ./texts/m.csv is inside the folder --fortunes texts" -- \
  "$gpt" --steps 2 --fortunes texts --metrics ./texts/m.csv
expect_failure lstm_metrics_in_text 1 "--metrics texts/m.csv is inside the folder --fortunes texts" -- \
  "$lstm" --steps 2 --fortunes texts --metrics texts/m.csv
expect_failure board_in_data 1 "--tensorboard data_links/runs is inside the folder --data data_links" -- \
  "$cnn" "${tiny[@]}" --data data_links --tensorboard data_links/runs
[ ! -e same ] && [ ! -e same.st ] && [ ! -e texts/m.csv ] && [ ! -e data_links/m.csv ] && [ ! -e data_links/runs ] ||
  { echo "FAIL: a refused run wrote an output"; exit 1; }
for log in ckpt_folder metrics_missing trace_device gpt_metrics board_proc gpt_board metrics_is_ckpt trace_is_ckpt \
  metrics_in_data metrics_on_data gpt_metrics_in_text lstm_metrics_in_text board_in_data; do
  ! grep -q "^epoch\|^step" "$log.out" || { echo "FAIL $log: trained before checking its outputs"; exit 1; }
done

# Files that are not checkpoints, or damaged ones, are refused by name.
expect_failure resume_zero 1 "checkpoint /dev/zero: is not a regular file" -- \
  "$cnn" "${tiny[@]}" --resume --checkpoint /dev/zero
expect_failure resume_folder 1 "checkpoint folder: is a folder" -- "$cnn" "${tiny[@]}" --resume --checkpoint folder
expect_failure resume_missing 1 "checkpoint nothing.safetensors: cannot open it" -- \
  "$cnn" "${tiny[@]}" --resume --checkpoint nothing.safetensors
"$cnn" "${tiny[@]}" --checkpoint good.safetensors --metrics good.csv > good.log
python3 - << 'PY'
data = open("good.safetensors", "rb").read()
# One flipped bit in a tensor name (the '0' of an optimizer-state index becomes 'p'), and one in the data.
open("renamed.safetensors", "wb").write(data.replace(b'"optim.state.0.exp_avg"', b'"optim.state.p.exp_avg"', 1))
flipped = bytearray(data)
flipped[-5] ^= 0x04
open("flipped.safetensors", "wb").write(bytes(flipped))
PY
expect_failure renamed 1 "checkpoint renamed.safetensors: tensor 'optim.state.p.exp_avg' has no checksum" -- \
  "$cnn" "${tiny[@]}" --resume --checkpoint renamed.safetensors
expect_failure flipped 1 "checkpoint flipped.safetensors: tensor" -- \
  "$cnn" "${tiny[@]}" --resume --checkpoint flipped.safetensors
expect_failure other_run 1 "checkpoint good.safetensors was written with --lr 0.002; this run has --lr 0.01" -- \
  "$cnn" "${tiny[@]}" --lr 0.01 --resume --checkpoint good.safetensors --metrics good.csv
expect_failure other_seed 1 "was written with --seed 0; this run has --seed 5" -- \
  "$cnn" "${tiny[@]}" --seed 5 --resume --checkpoint good.safetensors --metrics good.csv
# Another model shape (tiny without its last two words, --width 2) is refused by its flag, before any
# tensor's shape is compared.
expect_failure other_width 1 "was written with --width 2; this run has --width 3: resume with the settings" -- \
  "$cnn" "${tiny[@]:0:${#tiny[@]}-2}" --width 3 --resume --checkpoint good.safetensors --metrics good.csv
# Another program's checkpoint is refused naming both programs and layouts.
"$ddp" "${tiny[@]}" --checkpoint ddp.safetensors --metrics ddp.csv > ddp.log 2>&1 || { cat ddp.log; exit 1; }
expect_failure other_program 1 \
  "checkpoint ddp.safetensors was written by ddp_fashion_mnist (ddp); this run is fashion_mnist_cnn (one device)" -- \
  "$cnn" "${tiny[@]}" --resume --checkpoint ddp.safetensors --metrics ddp.csv
# A file of zeros, or one whose length field is huge, is refused from its first 8 bytes.
head -c 1000000 /dev/zero > zeros.safetensors
expect_failure zeros 1 "checkpoint zeros.safetensors: the header claims 0 bytes (the file's first 8), too few" -- \
  "$cnn" "${tiny[@]}" --resume --checkpoint zeros.safetensors
printf '\377\377\377\377\377\377\377\177{}' > huge.safetensors
expect_failure huge 1 "the header claims 9223372036854775807 bytes, more than the format's limit of 104857600" -- \
  "$cnn" "${tiny[@]}" --resume --checkpoint huge.safetensors

# A header of the format's largest size that only nests arrays is refused at the ninth level, and a damaged
# checkpoint never reads as running out of memory ("try a smaller --batch-size").
python3 -c "
import struct
header = b'{\"w\":' + b'[' * (100 * 2**20 - 16)
open('deep.safetensors', 'wb').write(struct.pack('<Q', len(header)) + header)"
expect_failure deep 1 "checkpoint deep.safetensors: the header nests JSON more than 8 levels deep" -- \
  "$cnn" "${tiny[@]}" --resume --checkpoint deep.safetensors
rm deep.safetensors
# A text folder holding more than a model could take (a sparse 100 GiB file) is refused by its size
# before it is read, naming the file, not the batch size.
mkdir -p huge_text && cp /usr/share/games/fortunes/fortunes huge_text/ && truncate -s 100G huge_text/zz-huge
expect_failure huge_text 1 "read_fortunes: huge_text holds 107" -- "$lstm" --steps 2 --fortunes huge_text
grep -qF "the largest file, huge_text/zz-huge, has 107374182400" huge_text.err ||
  { echo "FAIL huge_text: the file is not named"; cat huge_text.err; exit 1; }
for log in deep huge_text; do
  ! grep -q -- "--batch-size" "$log.err" || { echo "FAIL $log: blamed the batch size"; cat "$log.err"; exit 1; }
done

# A metrics CSV that was damaged or edited is rebuilt from the checkpoint, never parsed.
printf 'epoch,step\n1,oops,,,\n' > good.csv
"$cnn" "${tiny[@]}" --resume --checkpoint good.safetensors --metrics good.csv > rebuilt.log
[ "$(wc -l < good.csv)" = 2 ] && grep -q '^1,2,' good.csv || { echo "FAIL: CSV not rebuilt"; cat good.csv; exit 1; }

# Links planted at the outputs (and at the fixed temporary name loom once used) never redirect a write.
echo precious > victim
ln -s victim planted.csv
ln -s victim planted.csv.tmp
ln -s victim planted.json
"$cnn" "${tiny[@]}" --checkpoint planted.safetensors --metrics planted.csv --trace planted.json > planted.log
[ "$(cat victim)" = precious ] || { echo "FAIL: a write went through a planted link"; exit 1; }
[ ! -L planted.csv ] && [ -s planted.csv ] || { echo "FAIL: planted.csv is not a fresh file"; exit 1; }

# A --metrics name as long as a file name may be (255 bytes) is written: its temporary's name is cut to fit.
long_name=$(printf 'm%.0s' $(seq 251)).csv
"$cnn" "${tiny[@]}" --checkpoint long.safetensors --metrics "$long_name" > long_name.log 2>&1 ||
  { echo "FAIL: a 255-character --metrics name"; cat long_name.log; exit 1; }
[ -s "$long_name" ] || { echo "FAIL: no metrics written at a 255-character name"; exit 1; }

# An empty test set (valid IDX files of no images) is refused before training, not reported as NaN.
mkdir -p empty_test
ln -s /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz empty_test/
ln -s /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz empty_test/
python3 - << 'PY'
import gzip, struct
with gzip.open("empty_test/t10k-images-idx3-ubyte.gz", "wb") as f: f.write(struct.pack(">IIII", 0x803, 0, 28, 28))
with gzip.open("empty_test/t10k-labels-idx1-ubyte.gz", "wb") as f: f.write(struct.pack(">II", 0x801, 0))
PY
expect_failure empty_test 1 "the test set in empty_test is empty" -- "$cnn" "${tiny[@]}" --data empty_test

# IDX files whose headers declare more than the reader takes, or counts that disagree, are refused from
# their headers: a gzip bomb costs its header, not the gigabytes it expands to.
mkdir -p bomb mismatch
ln -sf /usr/share/datasets/fashion-mnist/t10k-* bomb/
ln -sf /usr/share/datasets/fashion-mnist/* mismatch/
rm mismatch/train-images-idx3-ubyte.gz
python3 - << 'PY'
import gzip, struct
with gzip.open("bomb/train-images-idx3-ubyte.gz", "wb", compresslevel=1) as f:
    f.write(struct.pack(">IIII", 0x803, 2000000, 28, 28) + bytes(1 << 20))
with gzip.open("bomb/train-labels-idx1-ubyte.gz", "wb") as f: f.write(struct.pack(">II", 0x801, 2000000) + bytes(10))
with gzip.open("mismatch/train-images-idx3-ubyte.gz", "wb") as f: f.write(struct.pack(">IIII", 0x803, 100000, 28, 28))
PY
expect_failure idx_bomb 1 "read_idx: bomb/train-images-idx3-ubyte.gz: the header declares 1568000000 bytes of data \
(uint8 of shape [2000000, 28, 28]), more than the 1073741824 read_idx takes" -- "$cnn" "${tiny[@]}" --data bomb
expect_failure idx_counts 1 "FashionMnist: mismatch/train-images-idx3-ubyte.gz holds 100000 images but \
mismatch/train-labels-idx1-ubyte.gz holds 60000 labels" -- "$cnn" "${tiny[@]}" --data mismatch

# A batch or model that cannot fit in memory is refused before training, naming the flag and the numbers,
# not killed by the kernel without a word; LOOM_MEMORY_LIMIT_BYTES stands in for a 4 GiB machine.
small=(env LOOM_MEMORY_LIMIT_BYTES=$((4 << 30)))
expect_failure big_batch 1 "--batch-size 60000 needs about" -- "${small[@]}" "$cnn" --epochs 1 --batch-size 60000 \
  --width 64 --workers 0 --checkpoint big.safetensors --metrics big.csv
grep -qE "LOOM_MEMORY_LIMIT_BYTES allows 4.0 GiB; a run may plan on 90% of it: try --batch-size [0-9]+ or less$" \
  big_batch.err || { echo "FAIL big_batch: no numbers or hint"; cat big_batch.err; exit 1; }
expect_failure big_width 1 "--width 4096 needs about 102.5 GiB for the model" -- "${small[@]}" "$cnn" --width 4096 \
  --checkpoint big.safetensors --metrics big.csv
grep -q "try --width 760 or less" big_width.err || { echo "FAIL big_width: no hint"; cat big_width.err; exit 1; }
expect_failure ddp_batch 1 "--batch-size 60000 needs about" -- "${small[@]}" "$ddp" --epochs 1 --batch-size 60000 \
  --width 64 --workers 0 --checkpoint big.safetensors --metrics big.csv
expect_failure gpt_batch 1 "--batch-size 1048576 needs about" -- "${small[@]}" "$gpt" --steps 2 --batch-size 1048576
grep -q "try --batch-size [0-9]* or less" gpt_batch.err || { echo "FAIL gpt_batch: no hint"; cat gpt_batch.err; exit 1; }
expect_failure lstm_batch 1 "--batch-size 1048576 needs about" -- "${small[@]}" "$lstm" --steps 2 --batch-size 1048576
for log in big_batch big_width ddp_batch gpt_batch lstm_batch; do
  ! grep -q "^epoch\|^step" "$log.out" || { echo "FAIL $log: trained before checking its memory"; exit 1; }
done
[ ! -e big.safetensors ] || { echo "FAIL: a refused run wrote a checkpoint"; exit 1; }
# The same limit lets the usual runs through.
"${small[@]}" "$cnn" "${tiny[@]}" --checkpoint fits.safetensors --metrics fits.csv > fits.log 2>&1 ||
  { echo "FAIL: a small run was refused"; cat fits.log; exit 1; }
"${small[@]}" "$gpt" --steps 2 --eval-every 2 --sample 5 --metrics fits_gpt.csv > fits_gpt.log 2>&1 ||
  { echo "FAIL: char_gpt at its defaults was refused"; cat fits_gpt.log; exit 1; }

# A diverged run (NaN loss) still ends with valid JSON that says why a value is missing.
"$cnn" --epochs 1 --max-steps-per-epoch 5 --batch-size 32 --workers 0 --width 2 --lr 1e6 --checkpoint nan.safetensors --metrics nan.csv > nan.log
python3 - << 'PY'
import json
line = [l for l in open("nan.log") if l.startswith("RESULT ")][-1]
r = json.loads(line[len("RESULT "):])
assert r["test_loss"] is None and r["not_finite"]["test_loss"] == "nan", r
PY
echo PASS
