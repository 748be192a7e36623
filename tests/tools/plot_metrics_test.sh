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
echo PASS
