#!/usr/bin/env bash
# Every example runs end to end on tiny settings and ends with its RESULT line.
set -euo pipefail
dir=${TEST_TMPDIR:-$(mktemp -d)}
binaries=()
for b in "$@"; do binaries+=("$(realpath "$b")"); done
set -- "${binaries[@]}"
cd "$dir"  # the examples write their CSVs and checkpoints here
run() {
  local name=$1; shift
  "$@" > "$name.log" 2>&1 || { echo "$name failed:"; cat "$name.log"; exit 1; }
  grep -q "^RESULT {\"example\": \"$name\"" "$name.log" || { echo "$name: no RESULT line"; cat "$name.log"; exit 1; }
}
run autograd_mlp "$1" --steps 20
run char_gpt "$2" --steps 4 --eval-every 4 --batch-size 4 --sample 20
run char_gpt "$2" --steps 4 --eval-every 4 --batch-size 4 --sample 20 --precision bf16
run char_gpt "$2" --steps 4 --eval-every 4 --batch-size 4 --sample 20 --precision fp16
# float8 on the CPU: the simulated products, 256 tokens a batch (a multiple of 16).
run char_gpt "$2" --steps 4 --eval-every 4 --batch-size 4 --sample 20 --precision fp8
grep -q "^float8 training: 8 Linear layers" char_gpt.log || { echo "char_gpt --precision fp8: not converted"; cat char_gpt.log; exit 1; }
! grep -qi "nan" <(grep "^RESULT" char_gpt.log) || { echo "char_gpt --precision fp8: a NaN"; cat char_gpt.log; exit 1; }
run lstm_lm "$3" --steps 4 --eval-every 4 --batch-size 4 --hidden 32 --sample 20
# --fortunes reads another folder: a text of a, b and newlines has a vocabulary of 3.
mkdir -p text && python3 -c "print('ab' * 40 + '\n%\n' + 'ba' * 40, end='\n%\n', file=open('text/ab', 'w'))" &&
  for i in $(seq 30); do cat text/ab; done > text/abs && rm text/ab
run lstm_lm "$3" --steps 2 --eval-every 2 --batch-size 2 --hidden 8 --sample 5 --fortunes text
grep -q "^vocabulary 3," lstm_lm.log || { echo "lstm_lm --fortunes text: not read"; cat lstm_lm.log; exit 1; }
run fashion_mnist_cnn "$4" --epochs 1 --max-steps-per-epoch 3 --width 4 --workers 1
echo PASS
