#!/usr/bin/env bash
# Installs what is missing, builds, and runs loom's main demo: a CNN trained on
# Fashion-MNIST (5 epochs on the CPU by default; a few minutes on 2 cores).
# Arguments go to the example (try --help, or --device cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
bazel run //examples:fashion_mnist_cnn -- "$@"
