#!/usr/bin/env bash
# examples/standalone, a training program outside loom's tree, builds the
# three ways the README gives, each as a user would:
#   CMake       find_package(loom) against loom installed by tools/install.sh
#   pkg-config  g++ train.cc $(pkg-config --cflags --libs loom), the same install
#   Bazel       its own WORKSPACE: loom from source as @loom, loom_dependencies()
# Each program trains: its loss falls, two ranks under mpirun end with the
# same weights (DDP), rank 0 writes its checkpoint; and with one rank all
# three end with the same weights, since they run the same loom.
#
#   standalone_test.sh INSTALL_SH DIST_TAR LOOM_WORKSPACE_FILE
#
# The example folder has a WORKSPACE of its own, so loom's Bazel ignores it
# (.bazelignore) and it is read from the checkout (found from loom's
# WORKSPACE file): the test is tagged external, run every time.
#
# The Bazel build is CPU-only (--@loom//:cuda=false): nvcc would add many
# minutes. Its objects go to loom's disk cache (~/.cache/loom-bazel), so only
# the first run on a machine compiles loom (about 3.5 minutes on 2 cores).
set -euo pipefail
install=$(realpath "$1")
dist=$(realpath "$2")
loom=$(dirname "$(readlink -f "$3")")
example=$loom/examples/standalone
cd "${TEST_TMPDIR:-$(mktemp -d)}"
work=$PWD
fail() {
  echo "FAIL: $*"
  exit 1
}
[ -f "$example/train.cc" ] || fail "no $example/train.cc"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

"$install" --from "$dist" --prefix "$work/prefix" > install.log || { cat install.log; fail "install"; }

# ---- CMake ----
{ cmake -S "$example" -B cmake-build -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release &&
  cmake --build cmake-build; } > cmake.log 2>&1 || { cat cmake.log; fail "the CMake build"; }

# ---- pkg-config ----
# shellcheck disable=SC2046  # the flags are words
PKG_CONFIG_PATH=$work/prefix/lib/pkgconfig g++ -O2 -o train_pkgconfig "$example/train.cc" \
  $(PKG_CONFIG_PATH=$work/prefix/lib/pkgconfig pkg-config --cflags --libs loom) > pkgconfig.log 2>&1 ||
  { cat pkgconfig.log; fail "the pkg-config build"; }

# ---- Bazel ----
# The example's WORKSPACE finds loom at ../..: a tree whose top-level entries
# are loom's own, with the example copied in (not built inside the checkout).
mkdir -p tree/examples/standalone
for entry in "$loom"/*; do
  case "$(basename "$entry")" in examples | bazel-*) continue ;; esac
  ln -s "$entry" "tree/$(basename "$entry")"
done
find "$example" -maxdepth 1 -type f -exec cp {} tree/examples/standalone/ \;
home=$(getent passwd "$(id -u)" | cut -d: -f6)
(
  cd tree/examples/standalone
  # --batch: no server left behind; its own output root, removed below. A
  # fixed action PATH keeps the cached objects' keys the same whoever runs it.
  bazel --batch --output_user_root="$work/bazel_root" build \
    --disk_cache="$home/.cache/loom-bazel" --incompatible_strict_action_env \
    --spawn_strategy=processwrapper-sandbox --@loom//:cuda=false //:train
) > bazel.log 2>&1 || { tail -40 bazel.log; fail "the Bazel build"; }
cp tree/examples/standalone/bazel-bin/train train_bazel
chmod -R u+w bazel_root && rm -rf bazel_root tree

# ---- each program trains ----
declare -A fingerprint
for recipe in cmake pkgconfig bazel; do
  case $recipe in
    cmake) bin=$work/cmake-build/train ;;
    *) bin=$work/train_$recipe ;;
  esac
  mkdir -p "run_$recipe" && cd "run_$recipe"
  "$bin" --steps 60 --log-every 20 --checkpoint one.safetensors > one.log 2>&1 || { cat one.log; fail "$recipe: one rank"; }
  first=$(awk '$1 == "step" && $2 == 20 {print $4}' one.log)
  last=$(awk '$1 == "step" && $2 == 60 {print $4}' one.log)
  [ -n "$first" ] && [ -n "$last" ] || { cat one.log; fail "$recipe: no loss at steps 20 and 60"; }
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }' || { cat one.log; fail "$recipe: the loss did not fall ($first -> $last)"; }
  [ -s one.safetensors ] || fail "$recipe: no checkpoint"
  fingerprint[$recipe]=$(awk '$1 == "rank" && $2 == 0 {print $4}' one.log)

  mpirun -np 2 --oversubscribe --bind-to none "$bin" --steps 40 --checkpoint two.safetensors > two.log 2>&1 ||
    { cat two.log; fail "$recipe: two ranks under mpirun"; }
  grep -q "2 rank(s)" two.log || { cat two.log; fail "$recipe: mpirun did not give two ranks"; }
  weights=$(awk '$1 == "rank" && $3 == "weights" {print $4}' two.log | sort -u)
  [ "$(awk '$1 == "rank" && $3 == "weights"' two.log | wc -l)" = 2 ] || { cat two.log; fail "$recipe: expected a weights line from each rank"; }
  [ "$(echo "$weights" | wc -l)" = 1 ] || { cat two.log; fail "$recipe: the two DDP ranks ended with different weights"; }
  [ -s two.safetensors ] || fail "$recipe: rank 0 wrote no checkpoint"
  cd "$work"
  echo "$recipe: loss $first -> $last; DDP ranks equal ($weights)"
done
[ "${fingerprint[cmake]}" = "${fingerprint[pkgconfig]}" ] && [ "${fingerprint[cmake]}" = "${fingerprint[bazel]}" ] ||
  fail "one rank, same steps, different weights: cmake ${fingerprint[cmake]}, pkg-config ${fingerprint[pkgconfig]}, bazel ${fingerprint[bazel]}"

# A bad flag is a message and status 1, not a crash.
if "$work/train_pkgconfig" --steps zero > bad.log 2>&1; then fail "--steps zero was accepted"; fi
grep -q "^train: --steps: expected a positive integer, got 'zero'" bad.log || { cat bad.log; fail "--steps zero: no clear message"; }
echo PASS
