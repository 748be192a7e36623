#!/usr/bin/env bash
# Runs loom's train_bench and PyTorch's reference side by side for each model
# and prints both JSON lines plus the ratio loom/PyTorch of samples per second
# (above 1: loom is faster).
#
#   bash bench/compare_torch.sh [cpu|cuda] [steps] [threads]
# Both sides run with the same number of CPU threads (default: all cores).
# On the GPU machine, run it from the folder tools/gpu_run.sh prepared (the
# binaries are taken from $LOOM_BIN, default bazel-bin/bench).
#
# A reference runs at its best: on the CPU, Debian's PyTorch uses whatever
# libblas.so.3 the system selected, and the reference BLAS makes it about
# twice as slow (a CNN step: 304 ms on the reference BLAS, 153 ms on OpenBLAS,
# on this project's machine). So this script installs python3-torch and
# libopenblas0-pthread when they are missing (which selects OpenBLAS), refuses
# to run against the reference BLAS, and names the BLAS in PyTorch's JSON line.
set -euo pipefail
cd "$(dirname "$0")/.."
device=${1:-cpu}
steps=${2:-10}
threads=${3:-$(nproc)}
bin=${LOOM_BIN:-bazel-bin/bench}
[ -n "${LOOM_BIN:-}" ] || bazel build -c opt //bench:train_bench >/dev/null 2>&1
# Debian's PyTorch is in the system Python, which may not be the first python3.
python=python3
for p in /usr/bin/python3 python3; do
  if "$p" -c "import torch" 2>/dev/null; then python=$p; break; fi
done
if [ "$device" = cpu ] && [ -z "${LOOM_TORCH_PYTHON:-}" ]; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  if ! /usr/bin/python3 -c "import torch" 2>/dev/null || ! dpkg -s libopenblas0-pthread > /dev/null 2>&1; then
    echo "compare_torch: installing python3-torch and libopenblas0-pthread" >&2
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch libopenblas0-pthread > /dev/null
  fi
  python=/usr/bin/python3
  blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)
  case "$blas" in
    *openblas*) ;;
    *) echo "compare_torch: libblas.so.3 is $blas, not OpenBLAS: PyTorch would run handicapped." >&2
       echo "  select it: sudo update-alternatives --config libblas.so.3-x86_64-linux-gnu" >&2
       exit 1 ;;
  esac
fi
python=${LOOM_TORCH_PYTHON:-$python}  # another PyTorch (a virtual environment's) when set
for model in cnn gpt lstm; do
  loom=$("$bin/train_bench" --model "$model" --device "$device" --steps "$steps" --threads "$threads")
  torch=$("$python" bench/torch_reference.py --model "$model" --device "$device" --steps "$steps" --threads "$threads")
  echo "$loom"
  echo "$torch"
  "$python" -c 'import json,sys; l=json.loads(sys.argv[1]); t=json.loads(sys.argv[2]); print(json.dumps({"model": l["model"], "device": l["device"], "ratio_loom_over_torch": round(l["samples_per_s"] / t["samples_per_s"], 3)}))' "$loom" "$torch"
done
