#!/usr/bin/env bash
# tools/package_deb.sh makes a .deb that apt accepts and that works: its
# version is the library's, it declares the Debian packages libloom.so links
# (and libopenmpi-dev), apt on this machine would install it with no package
# missing, and once dpkg installs it (into a scratch root: the test must not
# change the machine) the CMake recipe builds examples/standalone against it
# and the program trains.
#
#   package_test.sh PACKAGE_DEB_SH DIST_TAR LOOM_WORKSPACE_FILE
set -euo pipefail
package=$(realpath "$1")
dist=$(realpath "$2")
example=$(dirname "$(readlink -f "$3")")/examples/standalone
cd "${TEST_TMPDIR:-$(mktemp -d)}"
work=$PWD
fail() {
  echo "FAIL: $*"
  exit 1
}

mkdir out
"$package" --from "$dist" --output "$work/out" > package.log 2>&1 || { cat package.log; fail "package_deb.sh"; }
debs=(out/loom_*.deb)
[ ${#debs[@]} = 1 ] && [ -f "${debs[0]}" ] || fail "expected one loom_*.deb, found: ${debs[*]}"
deb=$work/${debs[0]}
[ -z "$(find out -name '*.partial')" ] || fail "a partial package was left behind"

# ---- what the package says ----
version=$(tar -xOf "$dist" ./share/loom/buildinfo | sed -n 's/^version=//p')
[ "$(dpkg-deb -f "$deb" Package)" = loom ] || fail "the package is not named loom"
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "package version $(dpkg-deb -f "$deb" Version), library $version"
[ "$(basename "$deb")" = "loom_${version}_$(dpkg --print-architecture).deb" ] || fail "unexpected file name $(basename "$deb")"
depends=$(dpkg-deb -f "$deb" Depends)
tr ',' '\n' <<< "$depends" | sed 's/^ *//; s/ .*//' > depends.txt  # package names alone
for needed in libc6 libstdc++6 libgomp1 libopenmpi3 zlib1g libopenmpi-dev; do
  grep -qxF "$needed" depends.txt || fail "Depends does not name $needed: $depends"
done
dpkg-deb --contents "$deb" | awk '{print $6}' > contents.txt
for f in ./usr/include/loom/loom.h ./usr/lib/libloom.so.$version ./usr/lib/cmake/loom/loomConfig.cmake \
  ./usr/lib/pkgconfig/loom.pc; do
  grep -qx -- "$f" contents.txt || fail "the package lacks $f"
done

# ---- apt would install it here with nothing missing ----
apt-get install --simulate "$deb" > apt.log 2>&1 || { cat apt.log; fail "apt-get refuses the package"; }
grep -q '^Inst loom ' apt.log || { cat apt.log; fail "apt-get would not install loom"; }
if grep '^Inst ' apt.log | grep -v '^Inst loom '; then fail "the packages above were missing: setup.sh installs every dependency"; fi

# ---- dpkg installs it (scratch root); the CMake recipe works against it ----
root=$work/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
touch "$root/var/lib/dpkg/status"
# Its dependencies are this machine's, not the scratch root's: --force-depends.
dpkg --root="$root" --force-depends --force-not-root --force-script-chrootless -i "$deb" > dpkg.log 2>&1 ||
  { cat dpkg.log; fail "dpkg -i"; }
dpkg --root="$root" -s loom | grep -q '^Status: install ok installed' || fail "dpkg does not list loom as installed"
[ "$(readlink "$root/usr/lib/libloom.so")" = "libloom.so.${version%.*}" ] || fail "libloom.so link"
{ cmake -S "$example" -B build -DCMAKE_PREFIX_PATH="$root/usr" -DCMAKE_BUILD_TYPE=Release &&
  cmake --build build; } > cmake.log 2>&1 || { cat cmake.log; fail "the CMake build against the package"; }
# The scratch root is not in the loader's folders: point it there.
LD_LIBRARY_PATH=$root/usr/lib build/train --steps 40 --log-every 20 --checkpoint run.safetensors > train.log 2>&1 ||
  { cat train.log; fail "the program built against the package"; }
first=$(awk '$1 == "step" && $2 == 20 {print $4}' train.log)
last=$(awk '$1 == "step" && $2 == 40 {print $4}' train.log)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || { cat train.log; fail "the loss did not fall ($first -> $last)"; }
grep -q "^loom $version " train.log || { cat train.log; fail "the program does not run loom $version"; }
echo "package: $(basename "$deb"), Depends: $depends; loss $first -> $last"

# ---- bad input ----
if "$package" --from "$dist" --output "$work/missing" > bad.log 2>&1; then fail "a missing --output folder was accepted"; fi
grep -q "cannot write the package into $work/missing" bad.log || { cat bad.log; fail "no clear message for a missing --output"; }
echo PASS
