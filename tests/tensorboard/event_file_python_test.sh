#!/usr/bin/env bash
# A file loom's SummaryWriter wrote, read back by event_file_reader.py:
# Python's protobuf decodes the events and the reader checks every record's
# CRCs itself. Then a flipped byte and a cut-short file must be refused.
set -euo pipefail
writer=$(realpath "$1")
reader=$(realpath "$2")
dir=${TEST_TMPDIR:-$(mktemp -d)}
cd "$dir"
fail() { echo "FAIL: $*"; exit 1; }
# Debian's python3-protobuf is for Debian's python3, which another python3
# earlier on the PATH (pyenv's, say) does not see.
py=python3
"$py" -c 'import google.protobuf' 2>/dev/null || py=/usr/bin/python3

file=$("$writer" runs)
case "$(basename "$file")" in events.out.tfevents.*) ;; *) fail "file name $file" ;; esac
"$py" "$reader" "$file" > got.txt || fail "the reader refused $file: $(cat got.txt)"
# Histogram of 1,2,2,3 in 3 bins of 2/3: [1,5/3) [5/3,7/3) [7/3,3].
cat > want.txt <<'TXT'
0 file_version brain.Event:2 wall_time_ok=True
1 loss 0.5
2 loss 1
3 loss 1.5
4 loss 2
5 loss 2.5
5 lr 0.001
7 w histo min=1 max=3 num=4 sum=8 sum_squares=18 limits=1.66667,2.33333,3 buckets=1,2,1
TXT
diff want.txt got.txt || fail "the events read back differ (above: want, got)"

# A byte flipped inside the last record's data, and the file cut mid-record.
size=$(stat -c %s "$file")
cp "$file" flipped
printf '\x7f' | dd of=flipped bs=1 seek=$((size - 6)) conv=notrunc status=none
if "$py" "$reader" flipped > flipped.txt 2>&1; then fail "a flipped byte passed the CRC"; fi
grep -q "bad data CRC" flipped.txt || fail "flipped: $(cat flipped.txt)"
head -c $((size - 3)) "$file" > cut
if "$py" "$reader" cut > cut.txt 2>&1; then fail "a cut-short file passed"; fi
grep -q "cut short" cut.txt || fail "cut: $(cat cut.txt)"
echo PASS
