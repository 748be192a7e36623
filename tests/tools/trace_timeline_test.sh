#!/usr/bin/env bash
# tools/trace_timeline.py: a trace written here, with spans at known times on
# known lanes, drawn to a PNG; the gnuplot script it kept must hold those
# lanes in order and those boxes at those milliseconds, and a window or the
# last step must cut them where asked. Each bad input must end in its own
# message, a nonzero status, and no file (an old PNG left as it was).
set -euo pipefail
tool=$(realpath "$1")  # absolute: the test works in its own folder
dir=${TEST_TMPDIR:-$(mktemp -d)}
cd "$dir"
fail() { echo "FAIL: $*"; exit 1; }

# As parallel/trace.cc writes it: lanes are thread_name metadata, tids in the
# order the lanes were made (rank1's compute lane first, as in
# compare_parallel's traces); times in microseconds from an arbitrary origin.
# rank0/unused never gets a span and must not be drawn.
cat > trace.json <<'JSON'
{"displayTimeUnit": "ms", "traceEvents": [
 {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "loom"}},
 {"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "rank1/compute"}},
 {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "rank0/compute"}},
 {"ph": "M", "name": "thread_name", "pid": 0, "tid": 2, "args": {"name": "rank0/comm"}},
 {"ph": "M", "name": "thread_name", "pid": 0, "tid": 3, "args": {"name": "stage 0 (cpu)"}},
 {"ph": "M", "name": "thread_name", "pid": 0, "tid": 4, "args": {"name": "rank0/unused"}},
 {"ph": "X", "name": "forward", "cat": "compute", "pid": 0, "tid": 1, "ts": 1000000, "dur": 2000},
 {"ph": "X", "name": "backward", "cat": "compute", "pid": 0, "tid": 1, "ts": 1002000, "dur": 3500},
 {"ph": "X", "name": "optimizer", "cat": "compute", "pid": 0, "tid": 1, "ts": 1005500, "dur": 500},
 {"ph": "X", "name": "forward", "cat": "compute", "pid": 0, "tid": 1, "ts": 1010000, "dur": 1000},
 {"ph": "X", "name": "optimizer", "cat": "compute", "pid": 0, "tid": 1, "ts": 1011000, "dur": 1000},
 {"ph": "X", "name": "allreduce bucket 0", "cat": "communication", "pid": 0, "tid": 2, "ts": 1003000, "dur": 1250},
 {"ph": "X", "name": "allreduce bucket 1", "cat": "communication", "pid": 0, "tid": 2, "ts": 1004500, "dur": 1000},
 {"ph": "X", "name": "forward", "cat": "compute", "pid": 0, "tid": 0, "ts": 1000500, "dur": 2000},
 {"ph": "X", "name": "wait activation", "cat": "idle", "pid": 0, "tid": 3, "ts": 1006000, "dur": 1000}
]}
JSON

# check SCRIPT XRANGE LANES ROWS...: the kept script draws LANES (top to
# bottom, '|'-separated) over XRANGE, and exactly ROWS, each "kind|begin end lane".
check() {
  python3 - "$@" <<'PY'
import re, sys
script, xrange, lanes, *rows = sys.argv[1:]
text = open(script).read()
m = re.search(r"^set xrange \[(.*)\]$", text, re.M)
assert m and m.group(1) == xrange, f"xrange {m and m.group(1)}, expected {xrange}"
tics = re.search(r"^set ytics \((.*)\) nomirror$", text, re.M).group(1)
got = [(name.replace("''", "'"), int(row)) for name, row in re.findall(r"'((?:[^']|'')*)' (\d+)", tics)]
want = [(name, i) for i, name in enumerate(lanes.split("|"))]
assert got == want, f"lanes {got}, expected {want}"
found = []
for kind, block in re.findall(r"^# kind \d+: ([^\n]*?) \(\w+\);[^\n]*\n\$kind\d+ << EOD\n(.*?)^EOD$", text, re.M | re.S):
    for line in block.splitlines():
        begin, end, lane, _ = line.split(" ", 3)
        found.append(f"{kind}|{begin} {end} {lane}")
assert sorted(found) == sorted(rows), "boxes:\n  " + "\n  ".join(sorted(found)) + "\nexpected:\n  " + "\n  ".join(sorted(rows))
# Every datablock is plotted, as boxes.
assert text.count(" with boxxyerror ") == len(re.findall(r"^\$kind\d+ << EOD$", text, re.M)), "a block not plotted"
PY
}

is_png() {  # the PNG's signature, and its size from the IHDR chunk
  python3 - "$1" "$2" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
w, h = struct.unpack(">II", data[16:24])
assert f"{w}x{h}" == sys.argv[2], f"{w}x{h}, expected {sys.argv[2]}"
PY
}

# The whole trace: every span, in ms from the first (1,000,000 us).
python3 "$tool" trace.json all.png --size 800x300 --keep-script all.gp --title "it's a test" > out.txt
grep -q "wrote all.png: 4 lanes" out.txt || fail "summary line: $(cat out.txt)"
[ -s all.png ] || fail "no PNG"
is_png all.png 800x300
grep -q "^set title 'it''s a test'$" all.gp || fail "title not quoted for gnuplot"
grep -q "^set output 'all.png'$" all.gp || fail "the kept script does not name the PNG"
check all.gp "0.000:12.000" "rank0/compute|rank0/comm|rank1/compute|stage 0 (cpu)" \
  "forward|0.000 2.000 0" "forward|0.500 2.500 2" "forward|10.000 11.000 0" \
  "backward|2.000 5.500 0" "optimizer|5.500 6.000 0" "optimizer|11.000 12.000 0" \
  "allreduce bucket|3.000 4.250 1" "allreduce bucket|4.500 5.500 1" \
  "wait activation|6.000 7.000 3"

# A window: spans cut at its edges, spans outside it gone, lanes kept.
python3 "$tool" trace.json window.png --from-ms 4 --to-ms 10.5 --keep-script window.gp > /dev/null
is_png window.png 1000x318
check window.gp "4.000:10.500" "rank0/compute|rank0/comm|rank1/compute|stage 0 (cpu)" \
  "backward|4.000 5.500 0" "optimizer|5.500 6.000 0" "forward|10.000 10.500 0" \
  "allreduce bucket|4.000 4.250 1" "allreduce bucket|4.500 5.500 1" "wait activation|6.000 7.000 3"

# The last step, from the previous optimizer's end to the last optimizer's.
python3 "$tool" trace.json last.png --last-step --keep-script last.gp > out.txt
grep -q "10.000-12.000 ms, from the previous 'optimizer' span" out.txt || fail "last step: $(cat out.txt)"
check last.gp "10.000:12.000" "rank0/compute|rank0/comm|rank1/compute|stage 0 (cpu)" \
  "forward|10.000 11.000 0" "optimizer|11.000 12.000 0"

# Lanes picked and ordered by pattern.
python3 "$tool" trace.json lanes.png --lanes 'stage*,rank0/*' --keep-script lanes.gp > /dev/null
check lanes.gp "0.000:12.000" "stage 0 (cpu)|rank0/compute|rank0/comm" \
  "forward|0.000 2.000 1" "forward|10.000 11.000 1" "backward|2.000 5.500 1" \
  "optimizer|5.500 6.000 1" "optimizer|11.000 12.000 1" \
  "allreduce bucket|3.000 4.250 2" "allreduce bucket|4.500 5.500 2" "wait activation|6.000 7.000 0"

# The last step of the examples' traces: their "step" spans, the latest one.
cat > steps.json <<'JSON'
{"traceEvents": [
 {"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "rank 0"}},
 {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "rank0/comm"}},
 {"ph": "X", "name": "step", "cat": "compute", "pid": 0, "tid": 0, "ts": 0, "dur": 3000},
 {"ph": "X", "name": "step", "cat": "compute", "pid": 0, "tid": 0, "ts": 3000, "dur": 4000},
 {"ph": "X", "name": "allreduce bucket 0", "cat": "communication", "pid": 0, "tid": 1, "ts": 5000, "dur": 1500}
]}
JSON
python3 "$tool" steps.json steps.png --last-step --keep-script steps.gp > /dev/null
check steps.gp "3.000:7.000" "rank 0|rank0/comm" "step|3.000 7.000 0" "allreduce bucket|5.000 6.500 1"

# A pipeline's steps, with neither: the last span after the longest quiet gaps.
# The 0.01 ms gap inside step 2 is not a boundary; the 2 ms gap before it is.
cat > pipe.json <<'JSON'
{"traceEvents": [
 {"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "stage 0 (cpu)"}},
 {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "stage 1 (cpu)"}},
 {"ph": "X", "name": "forward", "cat": "compute", "pid": 0, "tid": 0, "ts": 0, "dur": 5000},
 {"ph": "X", "name": "backward", "cat": "compute", "pid": 0, "tid": 1, "ts": 5000, "dur": 5000},
 {"ph": "X", "name": "forward", "cat": "compute", "pid": 0, "tid": 0, "ts": 12000, "dur": 5000},
 {"ph": "X", "name": "wait activation", "cat": "idle", "pid": 0, "tid": 1, "ts": 12000, "dur": 5000},
 {"ph": "X", "name": "backward", "cat": "compute", "pid": 0, "tid": 1, "ts": 17010, "dur": 4990}
]}
JSON
python3 "$tool" pipe.json pipe.png --last-step --keep-script pipe.gp > /dev/null
check pipe.gp "12.000:22.000" "stage 0 (cpu)|stage 1 (cpu)" \
  "forward|12.000 17.000 0" "wait activation|12.000 17.000 1" "backward|17.010 22.000 1"

# Bad inputs: each its message, status 1 (2 for a bad command line), no new
# file, no temporary left behind, and an existing PNG untouched.
echo "an older picture" > keep.png
expect_error() {  # expect_error STATUS MESSAGE ARGS...
  local status=$1 message=$2
  shift 2
  set +e
  python3 "$tool" "$@" 2> err.txt > /dev/null
  local got=$?
  set -e
  [ "$got" = "$status" ] || fail "$* exited $got, expected $status ($(cat err.txt))"
  grep -qF -- "$message" err.txt || fail "$*: expected '$message', got: $(cat err.txt)"
  [ "$(wc -l < err.txt)" = 1 ] || [ "$status" = 2 ] || fail "$*: not one line: $(cat err.txt)"
  [ "$(cat keep.png)" = "an older picture" ] || fail "$*: keep.png was changed"
  [ ! -e new.png ] || fail "$*: left new.png"
  [ ! -e new.gp ] || fail "$*: left new.gp"
  if ls -A | grep -q '\.tmp$'; then fail "$*: left a temporary: $(ls -A | grep '\.tmp$')"; fi
}
expect_error 1 "trace_timeline: cannot read missing.json: No such file or directory" missing.json keep.png
echo "{not json" > broken.json
expect_error 1 "broken.json is not a Chrome trace: not JSON" broken.json keep.png
echo '{"events": []}' > other.json
expect_error 1 "other.json is not a Chrome trace: expected a JSON object with a 'traceEvents' list" other.json keep.png
cat > empty.json <<'JSON'
{"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "main"}}]}
JSON
expect_error 1 "empty.json holds no spans" empty.json keep.png
echo '{"traceEvents": [{"ph": "X", "name": "forward", "ts": 5}]}' > nodur.json
expect_error 1 "span event 0 ('forward') needs a numeric ts and a dur >= 0" nodur.json keep.png
expect_error 1 "cannot write the PNG no/such/folder/new.png: No such file or directory" trace.json no/such/folder/new.png
mkdir -p folder.png
expect_error 1 "cannot write the PNG folder.png: it is a folder" trace.json folder.png
expect_error 1 "cannot write the script no/such/new.gp" trace.json new.png --keep-script no/such/new.gp
expect_error 1 "no spans between 20.000 and 30.000 ms" trace.json keep.png --from-ms 20 --to-ms 30
expect_error 1 "--lanes: 'gpu*' matches no lane (lanes: rank0/compute, rank0/comm, rank1/compute, stage 0 (cpu))" \
  trace.json keep.png --lanes 'gpu*'
expect_error 2 "--from-ms (5) must be less than --to-ms (5)" trace.json keep.png --from-ms 5 --to-ms 5
expect_error 2 "--last-step and --from-ms/--to-ms" trace.json keep.png --last-step --from-ms 1
expect_error 2 "expected WIDTHxHEIGHT" trace.json keep.png --size 10x10
echo PASS
