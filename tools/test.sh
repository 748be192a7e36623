#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test; ends with
# the line "N passed, N failed, N skipped". Extra arguments go to `bazel test`.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1

bazel test //... "$@"
status=$?
python3 tools/count_tests.py || status=1

if [ "${CI:-}" = "true" ]; then
  # Each CI clone gets its own output base: drop it (the disk cache stays) and
  # leave no Bazel server behind.
  bazel clean --expunge >/dev/null 2>&1
  bazel shutdown >/dev/null 2>&1
fi
exit $status
