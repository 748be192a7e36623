#!/usr/bin/env bash
# tools/flight_record.py: records written here, as parallel/comm/flight_recorder.cc
# writes them, for jobs whose hang is known: the tool must name the ranks
# that wait, the ones that never entered, the ones with no record, a queued
# collective, a rank already past it, and unmatched sends and receives; a
# collective that failed while the group went on is not a wait. Each bad
# input must end in its own one-line message and status 1 (2 for a bad
# command line). tests/parallel/mpi_failure_test and flight_recorder_test run
# it on records that real jobs wrote.
set -euo pipefail
tool=$(realpath "$1")  # absolute: the test works in its own folder
dir=${TEST_TMPDIR:-$(mktemp -d)}
cd "$dir"
fail() { echo "FAIL: $*"; exit 1; }

# write FOLDER SPEC: one record per rank of SPEC, a Python literal:
# {rank: {"reason": ..., "job": ..., "groups": [(name, backend, size, rank, failure)],
#         "entries": [(group, op, seq, state, {extra fields})]}}
write() {
  python3 - "$@" <<'PY'
import ast, json, os, sys
folder, spec = sys.argv[1], ast.literal_eval(sys.argv[2])
os.makedirs(folder, exist_ok=True)
for rank, r in spec.items():
    groups = [{"name": n, "backend": b, "size": s, "rank": gr, "job_rank": rank, "failure": f}
              for n, b, s, gr, f in r["groups"]]
    entries = []
    for i, (g, op, seq, state, extra) in enumerate(r["entries"]):
        e = {"id": i + 1, "group": g, "op": op, "seq": seq, "p2p": op in ("send", "recv"), "dtype": "float32",
             "input_numel": 1024, "output_numel": 1024, "state": state,
             # Operation i issued 1 - i/10 s before the record, started 10 ms later, finished 50 ms later.
             "issued_us": 1000000 + i * 100000, "started_us": None if state == "queued" else 1010000 + i * 100000,
             "finished_us": 1050000 + i * 100000 if state in ("completed", "failed") else None}
        if op in ("all_reduce", "reduce_scatter"):
            e["reduce"] = "sum"
        e.update(extra)
        entries.append(e)
    record = {"format": "loom flight record 1", "rank": rank, "host": "h", "pid": 100 + rank,
              "job": r.get("job", "42"), "reason": r.get("reason", "signal SIGUSR2"), "written_us": 2000000,
              "capacity": 2048, "recorded": len(entries), "groups": groups, "entries": entries}
    with open(os.path.join(folder, f"flight_rank{rank}.json"), "w") as f:
        json.dump(record, f)
PY
}

expect_line() {  # expect_line FILE LINE: LINE is a whole line of FILE
  grep -qxF -- "$2" "$1" || fail "expected the line: $2
got:
$(cat "$1")"
}

# The issue's example: 4 ranks, rank 2 stuck before all_reduce #17.
W='("world", "mpi", 4, RANK, "")'
ar() { echo "(0, \"all_reduce\", $1, \"$2\", {})"; }
write four "{
 0: {'groups': [${W/RANK/0}], 'entries': [$(ar 16 completed), $(ar 17 started)], 'reason': 'the failure of group world'},
 1: {'groups': [${W/RANK/1}], 'entries': [$(ar 16 completed), $(ar 17 started)]},
 2: {'groups': [${W/RANK/2}], 'entries': [$(ar 15 completed), $(ar 16 completed)]},
 3: {'groups': [${W/RANK/3}], 'entries': [$(ar 16 completed), $(ar 17 started)]}}"
python3 "$tool" four > out.txt
expect_line out.txt "4 flight records (ranks 0, 1, 2, 3) of job 42, written on the failure of group world (rank 0); signal SIGUSR2 (ranks 1, 2, 3)"
expect_line out.txt "group world (mpi, 4 ranks): ranks 0, 1, 3 wait in all_reduce #17 (sum, 1024 x float32); rank 2 never entered it: its last is all_reduce #16, completed"
[ "$(wc -l < out.txt)" = 2 ] || fail "extra lines: $(cat out.txt)"

# The same with rank 2's record missing, given as files rather than a folder.
python3 "$tool" four/flight_rank0.json four/flight_rank1.json four/flight_rank3.json > out.txt
expect_line out.txt "group world (mpi, 4 ranks): ranks 0, 1, 3 wait in all_reduce #17 (sum, 1024 x float32); rank 2 wrote no record (dead, stopped, or not signalled)"

# A subgroup: rank 1 queued its broadcast #3 behind nothing it shows; rank 0,
# the root, is already past it (a broadcast's root may finish first) and waits
# in a barrier; rank 2 never got there. The world group is idle. The failed
# all_gather #2 (the ranks disagreed; the group went on) is no wait.
S='("world/split0.color0", "threads", 3, RANK, "")'
bc() { echo "(1, \"broadcast\", 3, \"$1\", {\"root\": 0})"; }
ag='(1, "all_gather", 2, "failed", {"output_numel": 3072, "error": "the ranks disagree"})'
ok1='(1, "all_reduce", 1, "completed", {})'
world='(0, "barrier", 1, "completed", {})'
write sub "{
 0: {'groups': [${W/RANK/0}, ${S/RANK/0}], 'entries': [$world, $ok1, $ag, $(bc completed), (1, 'barrier', 4, 'started', {})]},
 1: {'groups': [${W/RANK/1}, ${S/RANK/1}], 'entries': [$world, $ok1, $ag, $(bc queued)]},
 2: {'groups': [${W/RANK/2}, ${S/RANK/2}], 'entries': [$world, $ok1, $ag]},
 3: {'groups': [${W/RANK/3}], 'entries': [$world]}}"
python3 "$tool" sub > out.txt
expect_line out.txt "group world (mpi, 4 ranks): no collective pending; ranks 0, 1, 2, 3: last barrier #1"
expect_line out.txt "group world/split0.color0 (threads, 3 ranks): rank 1 waits in broadcast #3 (root 0, 1024 x float32); rank 1 issued it, but its communication thread has not started it (queued behind another operation); rank 2 never entered it: its last is all_gather #2, failed; rank 0 completed it and waits in barrier #4, started"

# Sends and receives: rank 1 waits for a second message with tag 4, and rank
# 0 sent one; rank 0's send to rank 2 waits for a receive rank 2 never posted.
p2p() { echo "(0, \"$1\", $2, \"$3\", {\"peer\": $4, \"tag\": $5})"; }
T='("world", "mpi", 3, RANK, "")'
write p2p "{
 0: {'groups': [${T/RANK/0}], 'entries': [$(p2p send 1 completed 1 4), $(p2p send 2 started 2 5)]},
 1: {'groups': [${T/RANK/1}], 'entries': [$(p2p recv 1 completed 0 4), $(p2p recv 2 started 0 4)]},
 2: {'groups': [${T/RANK/2}], 'entries': []}}"
python3 "$tool" p2p > out.txt
expect_line out.txt "group world (mpi, 3 ranks): no collective pending; ranks 0, 1, 2: none left in the record"
expect_line out.txt "  rank 0 waits in send #2 to rank 2 (tag 5, 1024 x float32), started; rank 2 recorded 0 recvs from it with tag 5"
expect_line out.txt "  rank 1 waits in recv #2 from rank 0 (tag 4, 1024 x float32), started; rank 0 recorded 1 send to it with tag 4 (last: send #1, completed)"

# A failed group: its failure is shown, and the failed collective is where the rank stopped.
F='("world", "mpi", 2, RANK, "rank RANK: all_reduce #2 (sum, 1024 x float32): did not complete within 2 s")'
write failed "{
 0: {'groups': [${F//RANK/0}], 'entries': [$(ar 1 completed), $(ar 2 failed)]},
 1: {'groups': [${W/RANK/1}], 'entries': [$(ar 1 completed)]}}"
sed -i 's/"size": 4/"size": 2/' failed/flight_rank1.json
python3 "$tool" failed --ops 5 > out.txt
expect_line out.txt "group world (mpi, 2 ranks): rank 0 waits in all_reduce #2 (sum, 1024 x float32); rank 1 never entered it: its last is all_reduce #1, completed"
expect_line out.txt "  rank 0 found it failed: rank 0: all_reduce #2 (sum, 1024 x float32): did not complete within 2 s"
expect_line out.txt "  rank 0's last 2 (seconds before its record was written: issued / started / finished):"
expect_line out.txt "    all_reduce #1 (sum, 1024 x float32): completed, 1.000 / 0.990 / 0.950"
expect_line out.txt "    all_reduce #2 (sum, 1024 x float32): failed, 0.900 / 0.890 / 0.850"
expect_line out.txt "  rank 1's last 1 (seconds before its record was written: issued / started / finished):"

# Bad inputs: each its message, status 1 (2 for a bad command line).
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
}
mkdir -p empty
expect_error 1 "flight_record: no flight_rank*.json in empty" empty
expect_error 1 "flight_record: cannot read missing.json: No such file or directory" missing.json
echo "{not json" > broken.json
expect_error 1 "broken.json is not a flight record: not JSON" broken.json
echo '{"traceEvents": []}' > trace.json
expect_error 1 "trace.json is not a flight record: expected \"format\": \"loom flight record 1\"" trace.json
mkdir -p mixed && cp four/flight_rank0.json four/flight_rank1.json mixed/
sed -i 's/"job": "42"/"job": "43"/' mixed/flight_rank1.json
expect_error 1 "records of different jobs: flight_rank0.json is job 42; flight_rank1.json is job 43 (remove the stale ones)" mixed
cp four/flight_rank1.json twice.json
expect_error 1 "rank 1 of group world is in two records: four/flight_rank1.json and twice.json (remove the stale one)" \
  four/flight_rank1.json twice.json
expect_error 2 "--ops must be 0 or more, got -1" four --ops -1
echo PASS
