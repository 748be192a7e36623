#!/usr/bin/env bash
# Builds loom's test and benchmark binaries here, and runs them on the GPU machine.
#
#   tools/gpu_run.sh build                     # here: Bazel + CUDA toolkit, no GPU needed
#   tools/gpu_run.sh run [options]             # on the GPU machine: no Bazel needed
#     --sanitize[=TOOL]   run the tests under compute-sanitizer (memcheck by default;
#                         also racecheck, synccheck, initcheck) with loom's caching
#                         allocator off (LOOM_CUDA_NO_CACHING=1), so that the tool sees
#                         every allocation's real bounds; no benchmark then
#     --filter REGEX      only test binaries whose name matches REGEX
#     --no-bench          skip the benchmark
#     --no-examples       skip the example runs (one epoch each of the Fashion-MNIST
#                         examples on the GPU: single, DataParallel on a repeated GPU,
#                         DDP and pipeline under mpirun -np 2, in-process pipeline)
#
# build: builds every GoogleTest binary (the cc_tests, and the *_mpi_test_bin programs
#   that run under mpirun), the Fashion-MNIST examples and //bench:cuda_bench with the
#   CUDA backend (with cuda_bench, allreduce_bench, compare_parallel and train_bench, and
#   bench/compare_torch.sh with torch_reference.py), takes the Fashion-MNIST files along (the GPU machine lacks them),
#   strips them, and packs them (with libgomp, in case the GPU machine lacks it) into
#   .gpu/bundle.tar.xz. The binaries share most of their bytes, so the solid archive is a
#   few MiB: small enough to carry to the GPU machine. It also copies this script to
#   .gpu/gpu_run.sh and writes .gpu/MANIFEST (commit, date, files).
# run: unpacks the bundle, sets LD_LIBRARY_PATH from the pip nvidia packages (see
#   docs/cuda.md), runs every test binary (the MPI ones under mpirun -np 2, two ranks
#   sharing the GPU) and the benchmarks (compare_torch against the machine's PyTorch,
#   and gpt under bf16 autocast on both sides), writes all logs, GoogleTest
#   XML and the benchmark's JSON lines under $OUT (default .gpu/out/<time>), and prints a
#   short summary table last. Exit status: 0 when every test binary passed.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
if [ -f "$here/bundle.tar.xz" ]; then
  gpu_dir="$here"                     # running the copy inside .gpu/
else
  gpu_dir="$(cd "$here/.." && pwd)/.gpu"
fi

usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

build() {
  cd "$here/.." || exit 1
  if [ ! -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]; then
    echo "gpu_run build: no CUDA toolkit (nvcc) here: the binaries would have no CUDA backend" >&2
    exit 1
  fi
  tools/setup.sh || exit 1
  local targets
  # sh_tests (scripts with runfiles) do not travel; mpi_failure_test needs its
  # helper's runfiles and checks nothing CUDA. The MPI test programs do travel.
  targets=$(bazel query 'kind(cc_test, tests(//...)) except //tests/parallel:mpi_failure_test
                         + attr(name, ".*mpi.*_test_bin$", //tests/...)' 2>/dev/null) \
    || { echo "gpu_run build: bazel query failed" >&2; exit 1; }
  # --//:cuda=true: fail loudly rather than quietly build a CPU-only bundle.
  local examples="//examples:fashion_mnist_cnn //examples:dp_fashion_mnist //examples:ddp_fashion_mnist
                  //examples:pipeline_fashion_mnist"
  local benches="//bench:cuda_bench //bench:allreduce_bench //bench:compare_parallel //bench:train_bench"
  bazel build --//:cuda=true $targets $examples $benches || exit 1

  rm -rf "$gpu_dir" && mkdir -p "$gpu_dir/stage/bin" "$gpu_dir/stage/lib" "$gpu_dir/stage/data"
  cp -r /usr/share/datasets/fashion-mnist "$gpu_dir/stage/data/" || exit 1
  # loom against PyTorch on the GPU machine's own PyTorch (bench/compare_torch.sh).
  mkdir -p "$gpu_dir/stage/bench" && cp bench/compare_torch.sh bench/torch_reference.py "$gpu_dir/stage/bench/"
  local label path name
  for label in $targets $examples $benches; do
    path="bazel-bin/${label#//}"
    path="${path/://}"
    name="$(basename "$path")"
    if [ -e "$gpu_dir/stage/bin/$name" ]; then
      echo "gpu_run build: two targets are named $name" >&2
      exit 1
    fi
    cp "$path" "$gpu_dir/stage/bin/$name" && chmod u+w "$gpu_dir/stage/bin/$name"
    strip "$gpu_dir/stage/bin/$name"
  done
  # OpenMP's runtime ships with GCC; the GPU machine has it when it has gcc, but carry it.
  cp "$(ldd "$gpu_dir/stage/bin/cuda_bench" | awk '/libgomp/ {print $3}')" "$gpu_dir/stage/lib/" 2>/dev/null
  {
    echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- . || echo ' (with uncommitted changes)')"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) with $("${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" --version | tail -1)"
    (cd "$gpu_dir/stage" && find . -type f | sort)
  } > "$gpu_dir/stage/MANIFEST"
  cp "$gpu_dir/stage/MANIFEST" "$gpu_dir/MANIFEST"
  # A solid archive with a dictionary larger than one binary stores the bytes
  # they share once: ~250 MB of binaries become ~5 MiB, in under a minute.
  tar -C "$gpu_dir/stage" -cf - . | xz --lzma2=preset=1,dict=128MiB -T1 > "$gpu_dir/bundle.tar.xz" || exit 1
  rm -rf "$gpu_dir/stage"
  cp "$0" "$gpu_dir/gpu_run.sh"
  echo "gpu_run build: $(du -sh "$gpu_dir" | cut -f1) in $gpu_dir ($(grep -c '^./bin/' "$gpu_dir/MANIFEST") binaries)."
  echo "On the GPU machine: bash .gpu/gpu_run.sh run   (or tools/gpu_run.sh run in the checkout)"
}

# Passed/failed/skipped counts from a GoogleTest XML file, as "P F S".
count_xml() {
  python3 - "$1" <<'EOF'
import sys, xml.etree.ElementTree as ET
p = f = s = 0
try:
    for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            f += 1
        elif case.get("result") == "skipped" or case.find("skipped") is not None:
            s += 1
        else:
            p += 1
except Exception:
    pass
print(p, f, s)
EOF
}

run() {
  local sanitize="" filter="." bench=1 examples=1
  while [ $# -gt 0 ]; do
    case "$1" in
      --sanitize) sanitize=memcheck ;;
      --sanitize=*) sanitize="${1#--sanitize=}" ;;
      --filter) shift; filter="${1:-.}" ;;
      --no-bench) bench=0 ;;
      --no-examples) examples=0 ;;
      *) usage ;;
    esac
    shift
  done
  [ -f "$gpu_dir/bundle.tar.xz" ] || { echo "gpu_run run: no $gpu_dir/bundle.tar.xz: run 'tools/gpu_run.sh build' first" >&2; exit 1; }
  local out="${OUT:-$gpu_dir/out/$(date +%Y%m%d-%H%M%S)}"
  local work="$gpu_dir/unpacked"
  rm -rf "$work" && mkdir -p "$work" "$out/tests" || exit 1
  tar -C "$work" -xJf "$gpu_dir/bundle.tar.xz" || exit 1
  cp "$work/MANIFEST" "$out/MANIFEST"

  # The CUDA libraries: from the pip nvidia packages when there are any
  # (PyTorch's), then the toolkit's.
  local pip_root
  pip_root=$(python3 -c "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))" 2>/dev/null)
  if [ -n "$pip_root" ]; then
    LD_LIBRARY_PATH="$(ls -d "$pip_root"/nvidia/*/lib | tr '\n' ':')/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  ldconfig -p 2>/dev/null | grep -q 'libgomp.so.1 ' || LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$work/lib"
  export LD_LIBRARY_PATH
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" > "$out/environment.txt"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> "$out/environment.txt" 2>&1

  local sanitizer=()
  if [ -n "$sanitize" ]; then
    local tool
    tool=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    [ -n "$tool" ] || { echo "gpu_run run: --sanitize needs compute-sanitizer (CUDA toolkit), not found" >&2; exit 1; }
    sanitizer=("$tool" --tool "$sanitize" --error-exitcode 86 --print-limit 100)
    export LOOM_CUDA_NO_CACHING=1  # every tensor its own cudaMalloc: exact bounds for the tool
    bench=0
    examples=0
  fi

  local summary="$out/summary.txt" total_p=0 total_f=0 total_s=0 failed_binaries=0
  printf '%-34s %7s %7s %7s %5s %7s\n' binary passed failed skipped rc seconds > "$summary"
  local bin name start rc secs counts p f s missing
  for bin in "$work"/bin/*_test; do
    name=$(basename "$bin")
    [[ "$name" =~ $filter ]] || continue
    missing=$(ldd "$bin" | grep 'not found')
    start=$(date +%s)
    timeout "${TEST_TIMEOUT:-1800}" "${sanitizer[@]}" "$bin" --gtest_output="xml:$out/tests/$name.xml" \
      > "$out/tests/$name.log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    [ -n "$missing" ] && echo "missing libraries: $missing" >> "$out/tests/$name.log"
    read -r p f s <<< "$(count_xml "$out/tests/$name.xml")"
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi  # crashed, timed out or sanitizer errors
    [ "$rc" -ne 0 ] && failed_binaries=$((failed_binaries + 1))
    total_p=$((total_p + p)); total_f=$((total_f + f)); total_s=$((total_s + s))
    printf '%-34s %7d %7d %7d %5d %7d\n' "$name" "$p" "$f" "$s" "$rc" "$secs" >> "$summary"
  done

  # The MPI test programs: two ranks sharing the GPU; each rank writes its XML.
  local ranks_dir
  for bin in "$work"/bin/*_test_bin; do
    name=$(basename "$bin")
    [[ "$name" =~ $filter ]] || continue
    [ -n "$sanitize" ] && continue  # compute-sanitizer under mpirun: not set up
    command -v mpirun > /dev/null || { echo "no mpirun: $name not run" >> "$summary"; continue; }
    ranks_dir="$out/tests/$name.ranks" && mkdir -p "$ranks_dir"
    start=$(date +%s)
    LOOM_RANK_XML_DIR="$ranks_dir" TEST_TMPDIR="$ranks_dir" timeout "${TEST_TIMEOUT:-1800}" \
      mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$bin" > "$out/tests/$name.log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    read -r p f s <<< "$(count_xml "$ranks_dir/rank0.xml")"
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    [ "$rc" -ne 0 ] && failed_binaries=$((failed_binaries + 1))
    total_p=$((total_p + p)); total_f=$((total_f + f)); total_s=$((total_s + s))
    printf '%-34s %7d %7d %7d %5d %7d\n' "$name (np 2)" "$p" "$f" "$s" "$rc" "$secs" >> "$summary"
  done

  # The examples, one epoch each on the GPU; their RESULT lines go to examples.txt.
  if [ "$examples" = 1 ] && [ -x "$work/bin/fashion_mnist_cnn" ]; then
    local ex="$out/examples" mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
    local common=(--epochs 1 --device cuda:0 --data "$work/data/fashion-mnist" --log-every 100)
    mkdir -p "$ex"
    (cd "$ex" && {
      timeout 600 "$work/bin/fashion_mnist_cnn" "${common[@]}" > single.log 2>&1; echo "single rc $?"
      timeout 600 "$work/bin/dp_fashion_mnist" "${common[@]}" --devices cuda:0,cuda:0 > dp.log 2>&1; echo "dp rc $?"
      timeout 600 "$work/bin/pipeline_fashion_mnist" "${common[@]}" --stages 2 > pipeline.log 2>&1
      echo "pipeline (2 stages in one process) rc $?"
      timeout 600 "${mpi[@]}" "$work/bin/ddp_fashion_mnist" "${common[@]}" > ddp.log 2>&1; echo "ddp (np 2) rc $?"
      timeout 600 "${mpi[@]}" "$work/bin/pipeline_fashion_mnist" "${common[@]}" > pipeline_ranks.log 2>&1
      echo "pipeline (np 2) rc $?"
      grep -h '^RESULT' ./*.log
    } > "$out/examples.txt" 2>&1)
  fi

  if [ "$bench" = 1 ] && [ -x "$work/bin/cuda_bench" ]; then
    "$work/bin/cuda_bench" > "$out/bench.jsonl" 2> "$out/bench.txt"
    echo "cuda_bench exit status $?" >> "$out/bench.txt"
    # NCCL on one rank (its own overhead), and every strategy on one GPU timed on the GPU's timeline.
    timeout 300 "$work/bin/allreduce_bench" --device cuda --ranks 1 --max-bytes 256M > "$out/allreduce.jsonl" 2>&1
    echo "allreduce_bench (nccl, 1 rank) exit status $?" >> "$out/bench.txt"
    (cd "$out" && timeout 600 "$work/bin/compare_parallel" --device cuda:0 --model cnn --steps 5 \
      --out "$out/compare_parallel" > "$out/compare_parallel.txt" 2>&1)
    echo "compare_parallel (cuda:0) exit status $?" >> "$out/bench.txt"
    # Training steps against PyTorch eager in the same call (issue #12), then
    # gpt under bf16 autocast on both sides (issue #17: loom has no 16-bit
    # CUDA kernels yet, so its line is expected to name that error).
    (cd "$work" && LOOM_BIN="$work/bin" timeout 900 bash bench/compare_torch.sh cuda 20 > "$out/compare_torch.jsonl" 2>&1)
    echo "compare_torch (cuda) exit status $?" >> "$out/bench.txt"
    for side in "$work/bin/train_bench" "python3 $work/bench/torch_reference.py"; do
      timeout 300 $side --model gpt --device cuda --steps 20 --precision bf16 >> "$out/compare_torch.jsonl" 2>&1
      echo "gpt bf16 ($side) exit status $?" >> "$out/bench.txt"
    done
  fi

  echo
  echo "logs, XML and benchmark output: $out"
  cat "$summary"
  [ -f "$out/bench.txt" ] && { echo; tail -n 12 "$out/bench.txt"; }
  [ -f "$out/examples.txt" ] && { echo; cat "$out/examples.txt"; }
  echo
  echo "$total_p passed, $total_f failed, $total_s skipped${sanitize:+ (under compute-sanitizer $sanitize)}" | tee -a "$summary"
  [ "$failed_binaries" -eq 0 ]
}

case "${1:-}" in
  build) build ;;
  run) shift; run "$@" ;;
  *) usage ;;
esac
