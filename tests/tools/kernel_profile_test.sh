#!/usr/bin/env bash
# tools/kernel_profile.py: an ncu raw CSV in (with ncu's and the program's own
# lines around it), each kernel's launches summed, the longest first; a file
# that is no report is an error that says so.
set -euo pipefail
tool=$1
dir=${TEST_TMPDIR:-$(mktemp -d)}
cat > "$dir/raw.csv" <<'CSV'
==PROF== Connected to process 42 (/bin/train_bench)
==PROF== Profiling "gemm": 0%....50%....100% - 1 pass
"ID","Process ID","Process Name","Kernel Name","Block Size","gpu__time_duration.sum"
"","","","","","usecond"
"0","42","train_bench","softmax_rows","(256, 1, 1)","1.5"
"1","42","train_bench","gemm","(128, 1, 1)","10"
"2","42","train_bench","softmax_rows","(256, 1, 1)","2.5"
"3","42","train_bench","gemm","(128, 1, 1)","1,000"
==PROF== Disconnected from process 42
{"framework": "loom", "model": "gpt"}
CSV
python3 "$tool" "$dir/raw.csv" > "$dir/out.txt"
# gemm: 1010 us in 2 launches, first; softmax_rows: 4 us in 2.
python3 - "$dir/out.txt" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
rows = [l.split() for l in lines[1:-1]]
assert [r[3] for r in rows] == ["gemm", "softmax_rows"], rows
assert abs(float(rows[0][0]) - 1.010) < 1e-9 and rows[0][1] == "2", rows[0]
assert abs(float(rows[1][0]) - 0.004) < 1e-9 and rows[1][1] == "2", rows[1]
assert rows[0][2] == "99.6%", rows[0]
totals = json.loads(lines[-1])
assert totals == {"kernels": 2, "launches": 4, "gpu_ms": 1.014}, totals
PY
echo 'no report here' > "$dir/bad.csv"
if python3 "$tool" "$dir/bad.csv" 2> "$dir/err"; then echo "expected failure"; exit 1; fi
grep -q "holds no ncu CSV report" "$dir/err" || { echo "unclear error: $(cat "$dir/err")"; exit 1; }
echo PASS
