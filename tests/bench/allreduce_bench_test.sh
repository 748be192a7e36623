#!/usr/bin/env bash
# allreduce_bench checks that its largest message fits in memory on every
# rank before it allocates anything: at its documented maximum (--max-bytes
# 16G) on a machine too small for it, a one-line error that names the flag,
# the numbers and the largest size that fits, instead of a kill by the
# kernel. LOOM_MEMORY_LIMIT_BYTES stands in for a small machine; a run that
# fits still runs under it.
set -euo pipefail
tool=$(realpath "$1")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
got=0
LOOM_MEMORY_LIMIT_BYTES=$((1 << 30)) timeout 60 "$tool" --max-bytes 16G > big.out 2> big.err || got=$?
# 2 rank threads x 16 GiB; 90% of 1 GiB leaves 460 MiB a rank: the largest size of 4K, 8K, ... is 256M.
expected="allreduce_bench: --max-bytes 16G needs about 32.0 GiB for the largest message (16.0 GiB for each of 2 rank \
threads); LOOM_MEMORY_LIMIT_BYTES allows 1.0 GiB; a run may plan on 90% of it: try --max-bytes 256M or less"
[ "$got" = 1 ] && [ "$(cat big.err)" = "$expected" ] && [ ! -s big.out ] ||
  { echo "FAIL: expected status 1 and"; echo "$expected"; echo "got status $got:"; cat big.err big.out; exit 1; }
got=0
LOOM_MEMORY_LIMIT_BYTES=$((1 << 30)) timeout 60 "$tool" --ranks 4 --min-bytes 512M --max-bytes 1G > min.out 2> min.err ||
  got=$?
[ "$got" = 1 ] && grep -qF "and even --max-bytes 512M needs 2.0 GiB: try a smaller --min-bytes than 512M, or fewer --ranks" min.err ||
  { echo "FAIL: --min-bytes too large for the limit"; cat min.err; exit 1; }
LOOM_MEMORY_LIMIT_BYTES=$((1 << 30)) "$tool" --max-bytes 64K --budget 0.01 > small.out 2>&1 ||
  { echo "FAIL: a run that fits was refused"; cat small.out; exit 1; }
grep -q '"bytes": 65536' small.out || { echo "FAIL: no 64K line"; cat small.out; exit 1; }
echo PASS
