# Helpers for the example tests (bash; source it).
#
#   expect_failure NAME STATUS TEXT -- COMMAND...   # fails with STATUS, stderr names TEXT, quickly, no crash
#   skip_test "why"                                  # reports the test as skipped to Bazel, with the reason

# Runs COMMAND (60 s at most); it must exit with STATUS (no signal, no
# std::terminate) and print TEXT on stderr. Output goes to NAME.out, NAME.err.
expect_failure() {
  local name=$1 status=$2 text=$3
  shift 4
  local got=0
  timeout 60 "$@" > "$name.out" 2> "$name.err" || got=$?
  if [ "$got" != "$status" ] || ! grep -qF -- "$text" "$name.err" || grep -q "terminate called" "$name.err"; then
    echo "FAIL $name: expected status $status and '$text' on stderr; got status $got:"
    cat "$name.err"
    return 1
  fi
}

# Bazel counts a test as skipped when the XML it leaves says so.
skip_test() {
  echo "SKIP: $1"
  if [ -n "${XML_OUTPUT_FILE:-}" ]; then
    printf '%s\n' '<?xml version="1.0" encoding="UTF-8"?>' \
      "<testsuites><testsuite name=\"${TEST_TARGET:-test}\" tests=\"1\" skipped=\"1\">" \
      "<testcase name=\"${TEST_TARGET:-test}\"><skipped message=\"$1\"/></testcase>" \
      '</testsuite></testsuites>' > "$XML_OUTPUT_FILE"
  fi
  exit 0
}
