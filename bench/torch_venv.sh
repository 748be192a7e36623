#!/usr/bin/env bash
# Prints the path of a python with the current PyTorch release, installing it
# first (pip, into a virtual environment under the user's cache) if needed.
# For benchmark references only: the README's two commands never run this.
#
#   LOOM_TORCH_PYTHON=$(bash bench/torch_venv.sh) bash bench/compare_torch.sh cpu
#
# PyPI's Linux wheel brings CUDA libraries along (a few GB once); on the CPU
# it uses its own bundled BLAS (MKL / oneDNN), which is what a user gets today.
set -euo pipefail
venv=${LOOM_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/loom/torch-venv}
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  echo "torch_venv: installing the current PyTorch into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip >&2
  "$venv/bin/pip" install --quiet torch numpy >&2
fi
echo "$venv/bin/python"
