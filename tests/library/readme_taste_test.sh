#!/usr/bin/env bash
# The README's "A taste" is a real program: it compiles against the installed
# loom under -Wall -Wextra -Werror and trains, alone and as two DDP ranks
# under mpirun. Only its epoch is cut to 40 batches (loader.epoch(0, 40)),
# so the test takes seconds rather than a whole epoch.
#
#   readme_taste_test.sh INSTALL_SH DIST_TAR README_MD
set -euo pipefail
install=$(realpath "$1")
dist=$(realpath "$2")
readme=$(realpath "$3")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
fail() {
  echo "FAIL: $*"
  exit 1
}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$install" --from "$dist" --prefix "$PWD/prefix" > install.log || { cat install.log; fail "install"; }

# The first C++ block after "## A taste".
awk '/^## A taste/ {taste = 1} taste && /^```cpp/ {code = 1; next} code && /^```/ {exit} code {print}' "$readme" > taste.cc
grep -q "DistributedDataParallel" taste.cc || { cat taste.cc; fail "no taste program found in the README"; }
grep -q "loader.epoch(0))" taste.cc || fail "the taste no longer loops over loader.epoch(0): update this test"
sed 's/loader.epoch(0))/loader.epoch(0, 40))/' taste.cc > taste_short.cc
# shellcheck disable=SC2046  # the flags are words
g++ -std=c++17 -O2 -Wall -Wextra -Werror taste_short.cc -o taste \
  $(PKG_CONFIG_PATH=$PWD/prefix/lib/pkgconfig pkg-config --cflags --libs loom) > build.log 2>&1 ||
  { cat build.log; fail "the README's taste does not compile cleanly"; }
./taste > one.log 2>&1 || { cat one.log; fail "the taste failed on one process"; }
mpirun -np 2 --oversubscribe --bind-to none ./taste > two.log 2>&1 || { cat two.log; fail "the taste failed under mpirun -np 2"; }
echo PASS
