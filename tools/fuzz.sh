#!/usr/bin/env bash
# Fuzzes the IDX parser with libFuzzer for a number of seconds.
#
#   tools/fuzz.sh [SECONDS] [CORPUS_DIR] [extra libFuzzer flags...]
#   tools/fuzz.sh 600 .fuzz/idx_corpus -jobs=1
#
# Bazel's gcc toolchain cannot build libFuzzer targets, so this compiles
# data/fuzz/idx_fuzzer.cc and the parser's few sources with clang
# (clang-14, libclang-rt-14-dev) and AddressSanitizer + UBSan. The corpus
# directory keeps what the fuzzer learnt between runs; it starts from a few
# valid files written here. Inputs that crash are saved in .fuzz/ as crash-*.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
corpus=${2:-.fuzz/idx_corpus}
shift $(( $# < 2 ? $# : 2 ))

CXX=${CXX:-clang++}
mkdir -p .fuzz "$corpus"
"$CXX" -std=c++17 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. \
  data/fuzz/idx_fuzzer.cc data/idx_parser.cc tensor/dtype.cc tensor/error.cc \
  -o .fuzz/idx_fuzzer

# Seeds: small valid files of each element type (magic 00 00 TT RR, dims, data).
seed() { printf "$2" > "$corpus/seed-$1"; }
if [ -z "$(ls -A "$corpus")" ]; then
  seed uint8 '\x00\x00\x08\x02\x00\x00\x00\x02\x00\x00\x00\x03\x01\x02\x03\x04\x05\x06'
  seed int8 '\x00\x00\x09\x01\x00\x00\x00\x02\xff\x7f'
  seed int16 '\x00\x00\x0b\x01\x00\x00\x00\x02\x80\x00\x12\x34'
  seed int32 '\x00\x00\x0c\x01\x00\x00\x00\x01\xff\xff\xff\xfe'
  seed float32 '\x00\x00\x0d\x01\x00\x00\x00\x01\x3f\x80\x00\x00'
  seed float64 '\x00\x00\x0e\x01\x00\x00\x00\x01\x3f\xf0\x00\x00\x00\x00\x00\x00'
  seed empty '\x00\x00\x08\x03\x00\x00\x00\x00\x00\x00\x00\x1c\x00\x00\x00\x1c'
fi

.fuzz/idx_fuzzer -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix=.fuzz/ "$@" "$corpus"
