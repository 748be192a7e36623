#!/usr/bin/env bash
# Prints the path of a python with the current PyTorch release, installing it
# first (pip, into a virtual environment under the user's cache) if needed.
# For benchmark references only: the README's two commands never run this.
#
#   bash bench/compare_torch.sh cpu          # runs it for the "current" reference
#
# PyPI's Linux wheel brings CUDA libraries along (a few GB once); on the CPU
# it uses its own bundled BLAS (MKL / oneDNN), which is what a user gets today.
set -euo pipefail
venv=${LOOM_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/loom/torch-venv}
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  echo "torch_venv: installing the current PyTorch into $venv" >&2
  if ! python3 -m venv "$venv" >&2; then  # Debian keeps venv in a package of its own
    sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
    python3 -m venv "$venv" >&2
  fi
  "$venv/bin/pip" install --quiet --upgrade pip >&2
  "$venv/bin/pip" install --quiet torch numpy >&2
fi
echo "$venv/bin/python"
