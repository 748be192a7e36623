#!/usr/bin/env bash
# The demo CNN trained under bf16 autocast (and fp16 with loss scaling) on
# the CPU reaches within one point of its fp32 test accuracy: one epoch at
# width 16, the same seed and batches.
set -euo pipefail
binary=$(realpath "$1")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
accuracy() {
  local precision=$1
  "$binary" --epochs 1 --width 16 --workers 1 --precision "$precision" \
    --metrics "$precision.csv" --checkpoint "$precision.safetensors" > "$precision.log" 2>&1 \
    || { echo "--precision $precision failed:"; cat "$precision.log"; exit 1; }
  sed -n 's/^RESULT .*"test_accuracy": \([0-9.]*\).*/\1/p' "$precision.log"
}
fp32=$(accuracy fp32)
bf16=$(accuracy bf16)
fp16=$(accuracy fp16)
echo "test accuracy: fp32 $fp32, bf16 $bf16, fp16 $fp16"
python3 - "$fp32" "$bf16" "$fp16" <<'EOF'
import sys
fp32, bf16, fp16 = map(float, sys.argv[1:])
assert fp32 > 0.85, f"fp32 reached only {fp32}: the comparison would mean nothing"
for name, got in (("bf16", bf16), ("fp16", fp16)):
    assert abs(got - fp32) <= 0.01, f"{name} {got} is more than a point from fp32 {fp32}"
print("PASS")
EOF
