#!/usr/bin/env bash
# pipeline_schedules prints each schedule and its simulated bubble, which for
# equal passes is the theory's: (p-1)/(m+p-1) for GPipe and 1F1B,
# (p-1)/(vm+p-1) interleaved; 1F1B's stage s holds p - s micro-batches;
# ZB-H1 idles (p-1)(F+I-W) a stage: with F = I = W (--backward-cost 2) a
# third of 1F1B's time, 3/27. ZB-V (two half-stage chunks in a V) idles only
# while the first micro-batch comes down, (p-1) chunk forwards: 3/51. ZB-H2
# (forwards ahead, 2p - 1 micro-batches held) reaches the one-chunk floor,
# (p-1) F of the step: with F = 1 and I = W = 1.5, 3/35, where ZB-H1's
# bubble slots cost F + I - W each and it idles 12.3%.
set -euo pipefail
source "$(dirname "$0")/expect.sh"
tool=$(realpath "$1")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
"$tool" --stages 4 --micro-batches 8 --chunks 2 > out.txt
fail() { echo "FAIL: $1"; cat out.txt; exit 1; }
[ "$(grep -c 'bubble 27.3% (equal passes in theory: 27.3%)' out.txt)" = 2 ] || fail "GPipe and 1F1B: 3/11"
grep -q 'bubble 15.8% (equal passes in theory: 15.8%)' out.txt || fail "interleaved x2: 3/19"
grep -q 'peak activations per stage: 4 3 2 1$' out.txt || fail "1F1B holds p - s micro-batches"
grep -q '^stage 3: F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1' out.txt || fail "ZB-H1's last stage puts off 3 Ws"
grep -q 'bubble 15.8% (these passes in theory: 15.8%); peak activations per stage: 4 4 4 4$' out.txt \
  || fail "ZB-H1 with I = W = F/2: 3/19, p micro-batches held until W"
"$tool" --stages 4 --micro-batches 8 --backward-cost 2 > equal.txt
grep -q 'bubble 11.1% (these passes in theory: 11.1%)' equal.txt || { cat equal.txt; fail "ZB-H1 with F = I = W: 3/27"; }
grep -q "bubble 5.9% (these passes, at least: 5.9%); peak activations per stage (chunks, each half a stage's): 8 8 8 8$" \
  equal.txt || { cat equal.txt; fail "ZB-V with F = I = W: 3/51, 2p half-stage chunks held"; }
grep -q '^== zb-v, 2 chunks a stage in a V' equal.txt || { cat equal.txt; fail "ZB-V's heading"; }
"$tool" --stages 4 --micro-batches 8 --backward-cost 3 --weight-share 0.5 --schedules zb-h1,zb-h2 --no-timeline > h2.txt
grep -q 'bubble 12.3% (these passes in theory: 8.6%)' h2.txt || { cat h2.txt; fail "ZB-H1 with F = 1, I = W = 1.5"; }
grep -q 'bubble 8.6% (these passes, at least: 8.6%); peak activations per stage: 7 7 7 7$' h2.txt \
  || { cat h2.txt; fail "ZB-H2 with F = 1, I = W = 1.5: the floor 3/35, 2p - 1 held"; }
# No weight gradients at all (W takes no time): ZB-V is still built and simulated.
"$tool" --weight-share 0 --schedules zb-v > no_w.txt
grep -q '^bubble [0-9.]*% (these passes, at least: 8.6%)' no_w.txt || { cat no_w.txt; fail "ZB-V with W = 0"; }
# The drawn steps: 1F1B's stage 0 waits 6 units (18 columns) for its first
# gradient, ZB-H1's 3 (an I is as short as a forward, so 9 columns).
grep -q '^stage 0: F0 F1 F2 F3 \.\{18\}B0    F4 B1' equal.txt || { cat equal.txt; fail "1F1B's drawn step"; }
grep -q '^stage 0: F0 F1 F2 F3 \.\{9\}I0 W0 F4 I1' equal.txt || { cat equal.txt; fail "ZB-H1's drawn step"; }
"$tool" --no-timeline > plain.txt
if grep -q 'on the ideal machine' plain.txt; then cat plain.txt; fail "--no-timeline drew the steps"; fi
"$tool" --stages 3 --micro-batches 4 > skip.txt
grep -q 'skipped: 4 micro-batches are not a multiple of the 3 stages' skip.txt || { cat skip.txt; exit 1; }
expect_failure chunks 2 "--chunks: expected an integer from 1 to 16" -- "$tool" --chunks 0
"$tool" --schedules 1f1b,zb-h1 > some.txt
[ "$(grep -c '^== ' some.txt)" = 2 ] && grep -q '^== 1f1b' some.txt && grep -q '^== zb-h1' some.txt \
  || { cat some.txt; fail "--schedules 1f1b,zb-h1 should print those two"; }
expect_failure schedules 2 "--schedules" -- "$tool" --schedules 1f1b,zb-h3
expect_failure weight 2 "--weight-share: expected a finite number from 0 to 1, got '2'" -- "$tool" --weight-share 2
echo PASS
