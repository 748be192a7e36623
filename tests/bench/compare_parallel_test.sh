#!/usr/bin/env bash
# compare_parallel runs every strategy on a small MLP and writes its table,
# JSON lines, CSV, chart and one trace per strategy; the traces are valid
# Chrome trace JSON; the same under mpirun. (Its numbers are timings, so only
# their shape is checked.)
set -euo pipefail
tool=$(realpath "$1")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
"$tool" --model mlp --mlp-hidden 64 --mlp-layers 4 --devices 2 --micro-batches 4 --steps 2 --warmup 1 \
  --timelines --out cmp > out.log 2>&1 || { cat out.log; exit 1; }
# --timelines draws each pipeline's last step: a header, then a line per stage.
for s in gpipe 1f1b interleaved zb-h1 zb-v; do
  [ "$(sed -n "/^$s, the last step as measured:$/,+2p" out.log | grep -c '^stage [01]: ')" = 2 ] \
    || { echo "no chart for $s"; cat out.log; exit 1; }
done
for s in single dp ddp zero1 zero2 fsdp layer_split gpipe 1f1b interleaved zb-h1 zb-v; do
  grep -q "^{\"bench\": \"compare_parallel\", \"model\": \"mlp\", \"strategy\": \"$s\"" out.log \
    || { echo "no JSON line for $s"; cat out.log; exit 1; }
  python3 -c "import json,sys; d=json.load(open('cmp_traces/$s.json')); sys.exit(0 if d['traceEvents'] else 1)" \
    || { echo "bad trace for $s"; exit 1; }
done
grep -q "NOTE: the 2 devices are one CPU" out.log || { echo "no shared-device note"; cat out.log; exit 1; }
[ "$(wc -l < cmp.csv)" = 14 ] || { echo "cmp.csv should have a header and 13 rows"; cat cmp.csv; exit 1; }
# ZeRO moves what DDP moves; FSDP 1.5 times that (its root, which stays gathered, moves 1x).
python3 - out.log <<'PY' || { cat out.log; exit 1; }
import json, sys
rows = {d["strategy"]: d for d in (json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"bench"'))}
ddp = rows["ddp"]["comm_bytes"]
for s in ("zero1", "zero2"):
    assert abs(rows[s]["comm_bytes"] / ddp - 1) < 0.01, (s, rows[s]["comm_bytes"], ddp)
assert 1.3 < rows["fsdp"]["comm_bytes"] / ddp <= 1.5, rows["fsdp"]["comm_bytes"] / ddp
assert rows["zero1"]["modeled_state_bytes"] < rows["ddp"]["modeled_state_bytes"]
assert rows["zero2"]["modeled_state_bytes"] < rows["zero1"]["modeled_state_bytes"]
assert rows["ddp"]["comm_ms"] is not None and rows["fsdp"]["comm_ms"] is None
for s, d in rows.items():  # a step splits into parts that are never negative
    parts = [d[k] for k in ("compute_ms", "comm_ms", "idle_ms") if d[k] is not None]
    assert min(parts) >= 0 and abs(sum(parts) - d["step_ms"]) < 0.01 * d["step_ms"] + 1e-3, (s, parts, d["step_ms"])
PY
# DDP with its buckets sent in bfloat16 or float16 moves half DDP's bytes.
"$tool" --model mlp --mlp-hidden 64 --mlp-layers 4 --devices 2 --steps 2 --warmup 1 \
  --strategies ddp,ddp_bf16,ddp_fp16 --out half > half.log 2>&1 || { cat half.log; exit 1; }
python3 - half.log <<'PY' || { cat half.log; exit 1; }
import json, sys
rows = {d["strategy"]: d for d in (json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"bench"'))}
for s in ("ddp_bf16", "ddp_fp16"):
    assert rows[s]["comm_bytes"] == rows["ddp"]["comm_bytes"] / 2, (s, rows[s]["comm_bytes"], rows["ddp"]["comm_bytes"])
PY
# --mesh adds the hybrid row: 2 data-parallel pipelines of 2 stages, as 4 threads.
"$tool" --model mlp --mlp-hidden 64 --mlp-layers 4 --devices 4 --mesh 2x2 --micro-batches 4 --steps 2 --warmup 1 \
  --strategies single,hybrid --out mesh > mesh.log 2>&1 || { cat mesh.log; exit 1; }
grep -q '^{"bench": "compare_parallel", "model": "mlp", "strategy": "hybrid", "devices": 4,' mesh.log \
  || { echo "no hybrid row"; cat mesh.log; exit 1; }
python3 -c "import json,sys; d=json.load(open('mesh_traces/hybrid.json')); sys.exit(0 if d['traceEvents'] else 1)" \
  || { echo "bad hybrid trace"; exit 1; }
# Tensor parallelism splits the GPT (2 ranks), with the tokens replicated and
# sharded along the sequence, and context parallelism splits its sequences
# (the keys and values all-gathered, or passed round the ranks);
# --checkpoint adds checkpointed rows beside the plain ones.
"$tool" --model gpt --devices 2 --steps 1 --warmup 1 --strategies single,ddp,tp,tp-sp,cp,cp-zigzag,cp-ring,cp-ring-zigzag,cp-ulysses --checkpoint --out gpt > gpt.log 2>&1 \
  || { cat gpt.log; exit 1; }
for s in single single_ckpt ddp ddp_ckpt tp tp-sp cp cp-zigzag cp-ring cp-ring-zigzag cp-ulysses; do
  grep -q "^{\"bench\": \"compare_parallel\", \"model\": \"gpt\", \"strategy\": \"$s\"" gpt.log \
    || { echo "gpt: no JSON line for $s"; cat gpt.log; exit 1; }
done
grep -q '"strategy": "tp", .*"projected_ms": null' gpt.log || { echo "tp: the projection should be null"; cat gpt.log; exit 1; }
# The GPT's shape from the flags: context parallelism over a 32-token context.
"$tool" --model gpt --gpt-context 32 --gpt-batch 4 --devices 2 --steps 1 --warmup 1 --strategies cp-zigzag \
  --out gptshape > gptshape.log 2>&1 || { cat gptshape.log; exit 1; }
grep -q '^{"bench": "compare_parallel", "model": "gpt", "strategy": "cp-zigzag", "devices": 2,' gptshape.log \
  || { echo "no cp-zigzag row at --gpt-context 32"; cat gptshape.log; exit 1; }
# --mesh DxT with the GPT: D data-parallel replicas in tensor parallel over T ranks.
"$tool" --model gpt --mesh 2x2 --steps 1 --warmup 1 --strategies hybrid-tp --out gptmesh > gptmesh.log 2>&1 \
  || { cat gptmesh.log; exit 1; }
grep -q '^{"bench": "compare_parallel", "model": "gpt", "strategy": "hybrid-tp", "devices": 4,' gptmesh.log \
  || { echo "no hybrid-tp row"; cat gptmesh.log; exit 1; }
# --mesh CxT with cp-tp: tensor parallel over T ranks, each group on 1/C of every sequence.
"$tool" --model gpt --mesh 2x2 --steps 1 --warmup 1 --strategies cp-tp --out cptp > cptp.log 2>&1 \
  || { cat cptp.log; exit 1; }
grep -q '^{"bench": "compare_parallel", "model": "gpt", "strategy": "cp-tp", "devices": 4,' cptp.log \
  || { echo "no cp-tp row"; cat cptp.log; exit 1; }
grep -q "^tp .*skipped" out.log || { echo "mlp: tp should say why it was skipped"; cat out.log; exit 1; }
if "$tool" --mesh 2by2 > badmesh.log 2>&1; then echo "--mesh 2by2 accepted"; exit 1; fi
grep -q "expected DxN" badmesh.log || { cat badmesh.log; exit 1; }
if command -v gnuplot > /dev/null; then
  [ -s cmp.png ] || { echo "gnuplot is installed but no chart was written"; exit 1; }
fi
# Under mpirun -np 3 the ranks are the devices: ddp and both pipelines run
# over them (one stage per rank), each rank writes its own trace, and the
# single-process strategies say why they were skipped.
export TMPDIR=/tmp  # Open MPI's session sockets need a short path
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np 3 --oversubscribe --bind-to none "$tool" --model mlp --mlp-hidden 64 --mlp-layers 4 --mlp-batch 96 --micro-batches 4 \
  --steps 2 --warmup 1 --timelines --out mpi > mpi.log 2>&1 || { cat mpi.log; exit 1; }
[ "$(sed -n '/^zb-h1, the last step as measured:$/,+3p' mpi.log | grep -c '^stage [012]: ')" = 3 ] \
  || { echo "mpirun: no chart for zb-h1"; cat mpi.log; exit 1; }
for s in single ddp zero1 zero2 fsdp gpipe 1f1b zb-h1 zb-v; do
  grep -q "^{\"bench\": \"compare_parallel\", \"model\": \"mlp\", \"strategy\": \"$s\", \"devices\": [13]," mpi.log \
    || { echo "mpirun: no JSON line for $s"; cat mpi.log; exit 1; }
done
grep -q "interleaved *skipped: needs --micro-batches a multiple of the 3 stages" mpi.log \
  || { echo "mpirun: interleaved with 4 micro-batches on 3 ranks should say why it is skipped"; cat mpi.log; exit 1; }
for s in ddp zero1 zero2 fsdp gpipe 1f1b zb-h1 zb-v; do
  for r in 0 1 2; do
    python3 -c "import json,sys; d=json.load(open('mpi_traces/${s}_rank$r.json')); sys.exit(0 if d['traceEvents'] else 1)" \
      || { echo "mpirun: bad trace for $s on rank $r"; exit 1; }
  done
done
[ "$(grep -c 'skipped: one process drives every device' mpi.log)" = 2 ] || { echo "dp, layer_split not skipped"; cat mpi.log; exit 1; }
if mpirun -np 2 --oversubscribe --bind-to none "$tool" --devices 3 --steps 1 > mismatch.log 2>&1; then
  echo "--devices 3 under mpirun -np 2 accepted"; exit 1
fi
grep -q "leave it out, the ranks are the devices" mismatch.log || { cat mismatch.log; exit 1; }
# A usage error, as documented: status 2 (the mismatch above, checked by its status here).
set +e
mpirun -np 2 --oversubscribe --bind-to none "$tool" --devices 3 --strategies ddp --steps 1 > mismatch2.log 2>&1
status=$?
set -e
grep -q "leave it out, the ranks are the devices" mismatch2.log || { cat mismatch2.log; exit 1; }
[ "$status" = 2 ] || { echo "--devices 3 under mpirun -np 2: status $status, not 2 (a usage error)"; cat mismatch2.log; exit 1; }
# A link planted at the chart's name is replaced, never written through.
echo "keep me" > victim.txt
ln -s victim.txt planted.png
"$tool" --model mlp --strategies single --steps 1 --warmup 0 --out planted > planted.log 2>&1 || { cat planted.log; exit 1; }
[ "$(cat victim.txt)" = "keep me" ] || { echo "the chart was written through a planted link"; exit 1; }
if command -v gnuplot > /dev/null; then
  [ -f planted.png ] && [ ! -L planted.png ] || { echo "planted.png is still a link"; ls -l planted.png; exit 1; }
fi
# Every strategy skipped is a failure (status 1) that names each and why, not an empty table, status 0
# and "gnuplot is missing" (as once, with gnuplot installed); no CSV or chart is left behind.
set +e
"$tool" --model mlp --strategies tp,hybrid-tp --steps 1 --out allskipped > allskipped.log 2> allskipped.err
status=$?
set -e
[ "$status" = 1 ] || { echo "every strategy skipped: status $status, not 1"; cat allskipped.log allskipped.err; exit 1; }
[ "$(cat allskipped.err)" = "compare_parallel: every strategy was skipped, so there is no CSV and no chart; \
tp: tensor parallelism here splits a GPT (--model gpt); hybrid-tp: tensor parallelism here splits a GPT (--model gpt)" ] \
  || { echo "every strategy skipped: wrong message"; cat allskipped.err; exit 1; }
! grep -q gnuplot allskipped.log allskipped.err || { echo "gnuplot blamed for an empty run"; exit 1; }
[ ! -e allskipped.csv ] && [ ! -e allskipped.png ] || { echo "an empty run wrote a CSV or chart"; exit 1; }
# The hybrid over processes: mpirun -np 4 --mesh 2x2.
mpirun -np 4 --oversubscribe --bind-to none "$tool" --model mlp --mlp-hidden 64 --mlp-layers 4 --micro-batches 4 \
  --steps 2 --warmup 1 --strategies hybrid --mesh 2x2 --out mpimesh > mpimesh.log 2>&1 || { cat mpimesh.log; exit 1; }
grep -q '"strategy": "hybrid", "devices": 4,' mpimesh.log || { echo "mpirun: no hybrid row"; cat mpimesh.log; exit 1; }
for r in 0 1 2 3; do
  python3 -c "import json,sys; d=json.load(open('mpimesh_traces/hybrid_rank$r.json')); sys.exit(0 if d['traceEvents'] else 1)" \
    || { echo "mpirun: bad hybrid trace on rank $r"; exit 1; }
done

# A bad --devices is a command-line error (status 2) naming the flag, the text and the device at fault;
# an index past an int's range is refused as written, never wrapped (cuda:99999999999 was once device 1215752191).
for bad in "," "cuda:0," "cpu,,cpu" "cuda:99999999999" "0" "65"; do
  case $bad in
    cuda:9*) why=": invalid device 'cuda:99999999999': a CUDA device index is from 0 to 127" ;;
    0 | 65) why="" ;;
    *) why=": invalid device '': expected cpu, cuda or cuda:N" ;;
  esac
  set +e
  "$tool" --devices "$bad" --steps 1 > baddevices.log 2>&1
  status=$?
  set -e
  [ "$status" = 2 ] && [ "$(cat baddevices.log)" = "compare_parallel: --devices: expected a count from 1 to 64, or a \
comma-separated list of devices, got '$bad'$why (see --help)" ] \
    || { echo "--devices '$bad': status $status, want 2 and the message"; cat baddevices.log; exit 1; }
done
set +e
"$tool" --device cuda:99999999999 --steps 1 > baddevice.log 2>&1
status=$?
set -e
[ "$status" = 2 ] && [ "$(cat baddevice.log)" = "compare_parallel: --device: invalid device 'cuda:99999999999': \
a CUDA device index is from 0 to 127 (see --help)" ] || { echo "--device cuda:99999999999: status $status"; cat baddevice.log; exit 1; }
# A pipeline cut that does not fit the model or the stages is a usage error naming it.
for cuts in "1,2" "0" "9"; do
  case "$cuts" in
    1,2) why="2 stages need 1 cut, got 2" ;;
    *) why="each cut must be a child's index from 1 to 8, rising (the model has 9 children)" ;;
  esac
  set +e
  "$tool" --model mlp --mlp-hidden 64 --mlp-layers 5 --strategies gpipe --stage-boundaries "$cuts" --steps 1 \
    > badcuts.log 2>&1
  status=$?
  set -e
  [ "$status" = 2 ] && [ "$(cat badcuts.log)" = "compare_parallel: --stage-boundaries $cuts: $why" ] \
    || { echo "--stage-boundaries $cuts: status $status, want 2 and the message"; cat badcuts.log; exit 1; }
done
# A cut that fits is where the pipelines are cut.
"$tool" --model mlp --mlp-hidden 64 --mlp-layers 5 --strategies gpipe --stage-boundaries 6 --micro-batches 4 --steps 1 \
  --warmup 0 --out cut > cut.log 2>&1 || { cat cut.log; exit 1; }
grep -q "^pipeline stages begin at children 6 (as --stage-boundaries asked)" cut.log || { cat cut.log; exit 1; }
# A bad flag value is a clear error.
if "$tool" --link carrier-pigeon > bad.log 2>&1; then echo "--link carrier-pigeon accepted"; exit 1; fi
grep -q "expected pcie or nvlink" bad.log || { cat bad.log; exit 1; }
echo PASS
