#!/usr/bin/env bash
# tools/plot_metrics.sh: a CSV in, a PNG out; a bad column name is an error that names it.
set -euo pipefail
tool=$1
dir=${TEST_TMPDIR:-$(mktemp -d)}
printf 'step,train_loss,test_accuracy\n1,2.3,0.1\n2,1.1,0.6\n3,0.6,0.85\n' > "$dir/m.csv"
"$tool" "$dir/m.csv" "$dir/m.png" >/dev/null
# PNG files start with \x89PNG.
[ "$(head -c 4 "$dir/m.png" | od -An -c | tr -d ' ')" = "211PNG" ] || { echo "not a PNG"; exit 1; }
if "$tool" "$dir/m.csv" "$dir/x.png" step missing 2> "$dir/err"; then echo "expected failure"; exit 1; fi
grep -q "no column 'missing'" "$dir/err" || { echo "unclear error: $(cat "$dir/err")"; exit 1; }
[ ! -e "$dir/x.png" ] || { echo "left a PNG behind"; exit 1; }
ls "$dir" | grep -q tmp && { echo "left a temporary behind: $(ls "$dir")"; exit 1; }
# Links planted at the PNG's name and at the temporary name the tool once used never redirect the chart.
echo precious > "$dir/victim"
ln -s victim "$dir/p.png"
ln -s victim "$dir/p.png.tmp.png"
"$tool" "$dir/m.csv" "$dir/p.png" >/dev/null
[ "$(cat "$dir/victim")" = precious ] || { echo "wrote through a planted link"; exit 1; }
[ ! -L "$dir/p.png" ] && [ "$(head -c 4 "$dir/p.png" | od -An -c | tr -d ' ')" = "211PNG" ] ||
  { echo "p.png is not a fresh PNG"; exit 1; }
# The chart may not replace its own CSV, however spelled.
if "$tool" "$dir/m.csv" "$dir/./m.csv" 2> "$dir/err"; then echo "expected failure"; exit 1; fi
grep -q "is the CSV" "$dir/err" || { echo "unclear error: $(cat "$dir/err")"; exit 1; }
grep -q '^step,' "$dir/m.csv" || { echo "the CSV was overwritten"; exit 1; }
echo PASS
