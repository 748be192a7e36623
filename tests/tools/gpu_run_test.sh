#!/usr/bin/env bash
# tools/gpu_run.sh run, on a bundle of stand-in programs and with stub
# nvidia-smi and ncu, so that its verdicts are checked without a GPU:
#   - a skip that needs more GPUs than the machine has is expected; any other
#     skip, a failure or a crash counts as failed, and the run exits non-zero;
#   - no GPU seen: it refuses to run;
#   - --bench-filter runs only the named steps, and the kernel profiles are
#     summed into bench.txt.
set -euo pipefail
runner=$(realpath "$1")
profile_tool=$(realpath "$2")
root=${TEST_TMPDIR:-$(mktemp -d)}
cd "$root"

# A test binary as GoogleTest writes its XML: `passed` cases that pass, then
# one that skips with $SKIP's message (none if empty); exit status $RC.
fake_test() {  # fake_test NAME PASSED SKIP RC
  cat > "stage/bin/$1" <<EOF
#!/usr/bin/env bash
xml=\${1#--gtest_output=xml:}
{
  echo '<testsuites><testsuite name="Fake">'
  for i in \$(seq 1 $2); do echo "<testcase name=\"case\$i\" classname=\"Fake\" result=\"completed\"/>"; done
  [ -n "$3" ] && echo '<testcase name="skips" classname="Fake" result="skipped"><skipped message="$3"/></testcase>'
  echo '</testsuite></testsuites>'
} > "\$xml"
exit $4
EOF
  chmod +x "stage/bin/$1"
}

# bundle NAME: packs stage/ into NAME/bundle.tar.xz beside a copy of the runner.
bundle() {
  rm -rf "$1" && mkdir -p "$1"
  echo "commit fake" > stage/MANIFEST
  tar -C stage -cJf "$1/bundle.tar.xz" .
  cp stage/MANIFEST "$1/MANIFEST"
  cp "$runner" "$1/gpu_run.sh"
}

mkdir -p stubs
cat > stubs/nvidia-smi <<'EOF'
#!/usr/bin/env bash
[ "${FAKE_GPUS:-1}" = 0 ] && exit 0
case "$*" in
  *-L*) echo "GPU 0: Stand-in GPU (UUID: GPU-0)" ;;
  *) echo "Stand-in GPU, 0.0, 1 MiB" ;;
esac
EOF
cat > stubs/ncu <<'EOF'
#!/usr/bin/env bash
echo '"ID","Process ID","Process Name","Kernel Name","gpu__time_duration.sum"'
echo '"","","","","usecond"'
echo '"0","1","train_bench","gemm","300"'
echo '"1","1","train_bench","softmax","100"'
EOF
chmod +x stubs/*
export PATH="$root/stubs:$PATH"

# 1. Passes and a skip that needs two GPUs, on a machine with one: green.
mkdir -p stage/bin stage/bench
cp "$profile_tool" stage/bench/kernel_profile.py
fake_test cuda_fake_test 3 "needs 2 GPUs; this machine has 1" 0
fake_test host_fake_test 2 "" 0
bundle good
OUT="$root/out_good" && mkdir -p "$OUT" && export OUT
bash good/gpu_run.sh run --no-examples --no-bench > good.log 2>&1 || { echo "a green run failed:"; cat good.log; exit 1; }
grep -q "^5 passed, 0 failed, 1 skipped (0 unexpectedly), 0 binaries not run" out_good/summary.txt ||
  { echo "unexpected summary:"; cat out_good/summary.txt; exit 1; }

# 2. A skip for want of a GPU, and a crash: both counted failed, exit non-zero.
fake_test cuda_skips_test 1 "no CUDA device" 0
fake_test crashes_test 0 "" 3
bundle bad
OUT="$root/out_bad" && mkdir -p "$OUT"
if bash bad/gpu_run.sh run --no-examples --no-bench > bad.log 2>&1; then
  echo "a run with an unexpected skip and a crash passed"; cat out_bad/summary.txt; exit 1
fi
grep -q "^6 passed, 2 failed, 2 skipped (1 unexpectedly)" out_bad/summary.txt ||
  { echo "unexpected summary:"; cat out_bad/summary.txt; exit 1; }
grep -q "Fake.skips: no CUDA device" out_bad/summary.txt || { echo "the skip is not named:"; cat out_bad/summary.txt; exit 1; }

# 3. No GPU: it refuses, saying why.
OUT="$root/out_none" && mkdir -p "$OUT"
if FAKE_GPUS=0 bash good/gpu_run.sh run --no-examples --no-bench > none.log 2>&1; then
  echo "ran without a GPU"; exit 1
fi
grep -q "nvidia-smi sees no GPU" none.log || { echo "no reason given:"; cat none.log; exit 1; }

# 4. One benchmark step by name: loom's gpt profile, summed; nothing else runs.
rm -f stage/bin/*_test
printf '#!/usr/bin/env bash\nexit 0\n' > stage/bin/train_bench && chmod +x stage/bin/train_bench
bundle bench
OUT="$root/out_bench" && mkdir -p "$OUT"
bash bench/gpu_run.sh run --no-tests --no-examples --bench-filter 'profile gpt \(ncu\)' > bench.log 2>&1 ||
  { echo "the filtered benchmark failed:"; cat bench.log; exit 1; }
mkdir unpacked && tar -C unpacked -xzf out_bench/results.tgz
grep -q "^profile gpt (ncu) exit status 0" unpacked/bench.txt || { cat unpacked/bench.txt; exit 1; }
grep -Eq "^profile gpt: +0.300 +1 +75.0% +gemm" unpacked/bench.txt || { cat unpacked/bench.txt; exit 1; }
if grep -Eq "cuda_bench|torch|lstm|round" unpacked/bench.txt; then
  echo "steps outside the filter ran:"; cat unpacked/bench.txt; exit 1
fi
echo PASS
