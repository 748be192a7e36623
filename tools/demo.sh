#!/usr/bin/env bash
# Installs what is missing, builds, and runs loom's main demo: training a model.
# Arguments go to the example (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
bazel run //examples:autograd_mlp -- "$@"
