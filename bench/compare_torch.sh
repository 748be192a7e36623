#!/usr/bin/env bash
# Runs loom's train_bench and PyTorch's reference side by side for each model,
# in several alternating rounds, and prints their JSON lines, per round the
# ratio loom/PyTorch of samples per second (above 1: loom is faster), and at
# the end each model's medians, spreads and ratio of medians.
#
#   bash bench/compare_torch.sh [cpu|cuda] [steps] [threads] [flags...]
# Both sides run with the same number of CPU threads (default: all cores),
# the same steps after the same warm-up, and the flags that follow, if any
# (--precision bf16, --tf32). On CUDA both time between two device
# synchronisations, with float32 products and convolutions exact FP32 unless
# --tf32 (PyTorch's own default lets cuDNN use TF32: torch_reference.py turns
# it off), and each line names the GPU. A ratio is printed only for two
# lines that agree on the model, precision, TF32 and steps.
# On the GPU machine, run it from the folder tools/gpu_run.sh prepared (the
# binaries are taken from $LOOM_BIN, default bazel-bin/bench).
#
# References on the CPU (LOOM_TORCH_REFERENCES, default "debian current"):
#   debian   Debian's python3-torch (1.13) on OpenBLAS, installed with apt if
#            missing. A reference runs at its best: on the reference BLAS it is
#            about twice as slow (a CNN step: 304 ms against 153 ms here), so
#            this script refuses to run against it and names the BLAS it used.
#   current  the current PyTorch release from PyPI, in a virtual environment
#            under ~/.cache/loom (bench/torch_venv.sh installs it on first use:
#            a few GB), with its bundled MKL and oneDNN: what a user picks today.
# On the GPU machine the reference is the python that has torch there
# (LOOM_TORCH_PYTHON overrides it, on any device).
set -euo pipefail
cd "$(dirname "$0")/.."
device=${1:-cpu}
steps=${2:-10}
threads=${3:-$(nproc)}
flags=("${@:4}")
bin=${LOOM_BIN:-bazel-bin/bench}
[ -n "${LOOM_BIN:-}" ] || bazel build -c opt //bench:train_bench >/dev/null 2>&1

debian_python() {
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  if ! /usr/bin/python3 -c "import torch" 2>/dev/null || ! dpkg -s libopenblas0-pthread > /dev/null 2>&1; then
    echo "compare_torch: installing python3-torch and libopenblas0-pthread" >&2
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch libopenblas0-pthread > /dev/null
  fi
  local blas
  blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)
  case "$blas" in
    *openblas*) ;;
    *) echo "compare_torch: libblas.so.3 is $blas, not OpenBLAS: PyTorch would run handicapped." >&2
       echo "  select it: sudo update-alternatives --config libblas.so.3-x86_64-linux-gnu" >&2
       exit 1 ;;
  esac
  echo /usr/bin/python3
}

pythons=()
if [ -n "${LOOM_TORCH_PYTHON:-}" ]; then
  pythons=("$LOOM_TORCH_PYTHON")
elif [ "$device" = cpu ]; then
  for reference in ${LOOM_TORCH_REFERENCES:-debian current}; do
    case "$reference" in
      debian) pythons+=("$(debian_python)") ;;
      current) pythons+=("$(bash bench/torch_venv.sh)") ;;
      *) echo "compare_torch: unknown reference '$reference' (debian or current)" >&2; exit 1 ;;
    esac
  done
else
  python=python3  # the GPU machine's PyTorch may not be in the first python3
  for p in /usr/bin/python3 python3; do
    if "$p" -c "import torch" 2>/dev/null; then python=$p; break; fi
  done
  pythons=("$python")
fi

ratio() {  # ratio LOOM_LINE TORCH_LINE: their ratio line; fails if they measured different things
  python3 - "$1" "$2" <<'EOF'
import json, sys
l, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
differ = [k for k in ("model", "precision", "tf32", "steps") if l.get(k) != t.get(k)]
if differ:
    sys.exit(f"compare_torch: loom's and torch's lines differ in {differ}: no ratio")
print(json.dumps({"model": l["model"], "device": l["device"], "gpu": l["gpu"], "precision": l["precision"],
                  "tf32": l["tf32"], "reference": f"torch {t['torch_version']} ({t['gpu'] or t['blas']})",
                  "ratio_loom_over_torch": round(l["samples_per_s"] / t["samples_per_s"], 3)}))
EOF
}

# LOOM_ROUNDS rounds a model (default 5), loom and each reference in turn,
# the order flipped every round, so that both see the same minutes of a
# shared machine; then bench/torch_rounds.py's summary: each side's median
# and spread, the ratio of the medians, the median of the rounds' own
# ratios with an interval that holds it with at least 90% confidence, and
# the GEMM rate of that call.
# LOOM_BASE_BIN, a folder with an earlier build's train_bench, adds it to
# every round (an A/B of a change in the same call): the summary then gives
# its median and the speed-up of this build over it.
rounds=${LOOM_ROUNDS:-5}
models=${LOOM_MODELS:-cnn gpt gpt_large lstm}
common=(--device "$device" --steps "$steps" --threads "$threads" "${flags[@]}")
lines=$(mktemp)
trap 'rm -f "$lines"' EXIT
for model in $models; do
  for round in $(seq "$rounds"); do
    run_loom() { loom=$("$bin/train_bench" --model "$model" "${common[@]}"); echo "$loom" | tee -a "$lines"; }
    run_base() {
      [ -n "${LOOM_BASE_BIN:-}" ] || return 0
      "$LOOM_BASE_BIN/train_bench" --model "$model" "${common[@]}" |
        sed 's/"framework": "loom"/"framework": "loom_base"/' | tee -a "$lines"
    }
    [ $((round % 2)) = 1 ] && run_loom && run_base
    torches=()
    for python in "${pythons[@]}"; do
      torches+=("$("$python" bench/torch_reference.py --model "$model" "${common[@]}")")
      echo "${torches[-1]}" | tee -a "$lines"
    done
    [ $((round % 2)) = 0 ] && run_base && run_loom
    for torch in "${torches[@]}"; do ratio "$loom" "$torch"; done
  done
done
echo "summary (medians of $rounds rounds):"
python3 bench/torch_rounds.py < "$lines"
