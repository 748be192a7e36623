#!/usr/bin/env bash
# Runs a GoogleTest binary under `mpirun -np NP` for `bazel test`. Each rank
# writes its own XML; merge_rank_xml.py folds them into $XML_OUTPUT_FILE, so
# that a test failing on any rank counts as failed. Exits with mpirun's
# status, which is nonzero when any rank failed.
#
#   mpi_test_runner.sh NP MERGE_SCRIPT BINARY [gtest flags...]
set -uo pipefail
np=$1 merge=$2 binary=$3
shift 3

xml_dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/rank-xml.XXXXXX")
# Each rank writes its own XML; only this script may touch Bazel's result files.
# Open MPI keeps Unix sockets in a session directory under TMPDIR, and Bazel's
# test TMPDIR is too long for a socket path.
export TMPDIR=/tmp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
env -u XML_OUTPUT_FILE -u TEST_PREMATURE_EXIT_FILE LOOM_RANK_XML_DIR="$xml_dir" \
  mpirun -np "$np" --oversubscribe --bind-to none "$binary" "$@"
status=$?

if [ -n "${XML_OUTPUT_FILE:-}" ]; then
  python3 "$merge" --status "$status" --np "$np" --out "$XML_OUTPUT_FILE" "$xml_dir" || status=1
fi
exit $status
