#!/usr/bin/env bash
# fashion_mnist_cnn --resume ends exactly where an uninterrupted run ends:
# two short epochs straight, against the same run stopped after epoch 1 and resumed.
# The final checkpoints (model, optimizer, RNG state, metrics rows) must match
# exactly, apart from the columns that time the run.
set -euo pipefail
example=$1
same_state=$2
dir=${TEST_TMPDIR:-$(mktemp -d)}
common=(--max-steps-per-epoch 6 --batch-size 32 --workers 1 --width 4)
"$example" "${common[@]}" --epochs 2 --checkpoint "$dir/straight.safetensors" --metrics "$dir/straight.csv" > "$dir/straight.log"
"$example" "${common[@]}" --epochs 2 --stop-after-epoch 1 --checkpoint "$dir/resumed.safetensors" --metrics "$dir/resumed.csv" > "$dir/first.log"
"$example" "${common[@]}" --epochs 2 --checkpoint "$dir/resumed.safetensors" --metrics "$dir/resumed.csv" --resume > "$dir/second.log"
grep -q "resumed from" "$dir/second.log" || { echo "did not resume"; cat "$dir/second.log"; exit 1; }
python3 "$same_state" "$dir/straight.safetensors" "$dir/resumed.safetensors" "$dir/straight.csv" "$dir/resumed.csv"
straight=$(grep -o '"test_accuracy": [0-9.]*' "$dir/straight.log")
resumed=$(grep -o '"test_accuracy": [0-9.]*' "$dir/second.log")
[ "$straight" = "$resumed" ] || { echo "accuracy differs: $straight vs $resumed"; exit 1; }
[ "$(wc -l < "$dir/resumed.csv")" = 3 ] || { echo "metrics CSV should have a header and 2 rows"; cat "$dir/resumed.csv"; exit 1; }
# A damaged checkpoint is a clear error, not a crash.
head -c 100 "$dir/straight.safetensors" > "$dir/broken.safetensors"
if "$example" "${common[@]}" --epochs 2 --checkpoint "$dir/broken.safetensors" --resume 2> "$dir/err.log"; then
  echo "resuming from a truncated checkpoint should fail"; exit 1
fi
grep -q "broken.safetensors" "$dir/err.log" || { echo "error does not name the file: $(cat "$dir/err.log")"; exit 1; }
echo "PASS ($straight)"
