#!/usr/bin/env bash
# Fuzzes one of loom's file readers with libFuzzer for a number of seconds.
#
#   tools/fuzz.sh TARGET [SECONDS] [CORPUS_DIR] [extra libFuzzer flags...]
#   tools/fuzz.sh idx 600                 # the IDX parser (data/)
#   tools/fuzz.sh safetensors 600         # the checkpoint reader (nn/)
#   tools/fuzz.sh resume 600              # the whole resume path: file -> model, optimizer, metadata
#
# Bazel's gcc toolchain cannot build libFuzzer targets, so this compiles the
# target's fuzzer and the reader's few sources with clang (clang-14,
# libclang-rt-14-dev) and AddressSanitizer + UBSan. The corpus directory
# (default .fuzz/TARGET_corpus) keeps what the fuzzer learnt between runs; it
# starts from a few valid files written here. Inputs that crash are saved in
# .fuzz/ as crash-*.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-}
case $target in
  idx) sources=(data/fuzz/idx_fuzzer.cc data/idx_parser.cc tensor/dtype.cc tensor/error.cc) ;;
  safetensors)  # checkpoints carry a CRC-32 (zlib's)
    sources=(nn/fuzz/safetensors_fuzzer.cc nn/safetensors.cc tensor/dtype.cc tensor/error.cc tensor/shape.cc)
    extra=(-lz) ;;
  resume)  # everything a resume touches: the CPU tensor library, autograd, nn, optim, the run record
    sources=(examples/common/fuzz/resume_fuzzer.cc examples/common/run_record.cc examples/common/progress.cc
             tensor/*.cc tensor/cpu/*.cc tensor/ops/*.cc autograd/engine.cc autograd/graph_task.cc autograd/node.cc autograd/checkpoint.cc
             nn/*.cc nn/layers/*.cc nn/functional/*.cc optim/*.cc)
    extra=(-I/usr/include/eigen3 -fopenmp -lz) ;;
  *) echo "usage: tools/fuzz.sh idx|safetensors|resume [SECONDS] [CORPUS_DIR] [libFuzzer flags...]" >&2; exit 2 ;;
esac
seconds=${2:-60}
corpus=${3:-.fuzz/${target}_corpus}
shift $(( $# < 3 ? $# : 3 ))

CXX=${CXX:-clang++}
mkdir -p .fuzz "$corpus"
"$CXX" -std=c++17 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. \
  "${sources[@]}" ${extra[@]+"${extra[@]}"} -o ".fuzz/${target}_fuzzer"

seed() { printf "$2" > "$corpus/seed-$1"; }
if [ "$target" = safetensors ] && [ -z "$(ls -A "$corpus")" ]; then
  # Valid files: an 8-byte little-endian header length, the JSON header, the data.
  header='{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[1,1],"data_offsets":[8,10]},"__metadata__":{"k":"v"}}'
  { printf "\\x$(printf %02x ${#header})\\x00\\x00\\x00\\x00\\x00\\x00\\x00"; printf '%s' "$header"; printf '\x00\x00\x80\x3f\x00\x00\x00\x40\x49\x40'; } > "$corpus/seed-two"
  header='{"i":{"dtype":"I64","shape":[],"data_offsets":[0,8]}}'
  { printf "\\x$(printf %02x ${#header})\\x00\\x00\\x00\\x00\\x00\\x00\\x00"; printf '%s' "$header"; printf '\x07\x00\x00\x00\x00\x00\x00\x00'; } > "$corpus/seed-scalar"
fi
# Resume seeds: the valid checkpoints that the corpus test writes, and the checked-in corpus.
if [ "$target" = resume ] && [ -z "$(ls -A "$corpus")" ]; then
  cp examples/common/fuzz/corpus/* "$corpus"/ 2> /dev/null || true
  bazel test //tests/examples:resume_fuzz_test --test_env=LOOM_RESUME_SEEDS_DIR="$(realpath "$corpus")" \
    --spawn_strategy=local --cache_test_results=no > /dev/null || true
fi
# IDX seeds: small valid files of each element type (magic 00 00 TT RR, dims, data).
if [ "$target" = idx ] && [ -z "$(ls -A "$corpus")" ]; then
  seed uint8 '\x00\x00\x08\x02\x00\x00\x00\x02\x00\x00\x00\x03\x01\x02\x03\x04\x05\x06'
  seed int8 '\x00\x00\x09\x01\x00\x00\x00\x02\xff\x7f'
  seed int16 '\x00\x00\x0b\x01\x00\x00\x00\x02\x80\x00\x12\x34'
  seed int32 '\x00\x00\x0c\x01\x00\x00\x00\x01\xff\xff\xff\xfe'
  seed float32 '\x00\x00\x0d\x01\x00\x00\x00\x01\x3f\x80\x00\x00'
  seed float64 '\x00\x00\x0e\x01\x00\x00\x00\x01\x3f\xf0\x00\x00\x00\x00\x00\x00'
  seed empty '\x00\x00\x08\x03\x00\x00\x00\x00\x00\x00\x00\x1c\x00\x00\x00\x1c'
fi

".fuzz/${target}_fuzzer" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix=.fuzz/ "$@" "$corpus"
