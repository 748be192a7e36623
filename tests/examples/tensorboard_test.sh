#!/usr/bin/env bash
# The examples' --tensorboard files, read back by the independent reader
# (tests/tensorboard/event_file_reader.py): every tag docs/examples.md lists
# is there, a progress line's loss is the CSV's and the event file's alike,
# and MFU (torchtitan's mfu(%)) is a percentage above 0.
set -euo pipefail
cnn=$(realpath "$1")
gpt=$(realpath "$2")
reader=$(realpath "$3")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
py=python3
"$py" -c 'import google.protobuf' 2>/dev/null || py=/usr/bin/python3

"$cnn" --epochs 1 --max-steps-per-epoch 4 --batch-size 32 --workers 0 --width 2 --log-every 2 \
  --tensorboard cnn_runs > cnn.log 2>&1 || { cat cnn.log; fail "fashion_mnist_cnn"; }
"$py" "$reader" cnn_runs/events.out.tfevents.* > cnn.events || fail "the reader refused the CNN's file"
for tag in loss_metrics/step_loss lr "throughput(samples_per_s)" "mfu(%)" "memory/max_active(GiB)" \
  "memory/reserved(GiB)" loss_metrics/global_avg_loss validation_metrics/loss validation_metrics/accuracy; do
  grep -qF " $tag " cnn.events || fail "no $tag in the CNN's events: $(cat cnn.events)"
done
# Step 4's loss as the progress line printed it (4 decimals) and as logged.
line=$(sed -n 's/^step 4\/4  loss \([0-9.]*\) .*/\1/p' cnn.log)
logged=$(awk '$1 == 4 && $2 == "loss_metrics/step_loss" {printf "%.4f", $3}' cnn.events)
[ -n "$line" ] && [ "$line" = "$logged" ] || fail "step 4's loss: line '$line', event '$logged'"
awk '$2 == "mfu(%)" && !($3 > 0 && $3 <= 100) {bad = 1} END {exit bad}' cnn.events ||
  fail "an MFU outside (0, 100]: $(grep 'mfu' cnn.events)"

"$gpt" --steps 50 --eval-every 50 --tensorboard gpt_runs > gpt.log 2>&1 || { cat gpt.log; fail "char_gpt"; }
"$py" "$reader" gpt_runs/events.out.tfevents.* > gpt.events || fail "the reader refused char_gpt's file"
for tag in loss_metrics/step_loss lr "throughput(tps)" "mfu(%)" loss_metrics/estimated_train_loss \
  validation_metrics/loss; do
  grep -qF "50 $tag " gpt.events || fail "no $tag at step 50 in char_gpt's events: $(cat gpt.events)"
done
echo PASS
