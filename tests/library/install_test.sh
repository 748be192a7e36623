#!/usr/bin/env bash
# tools/install.sh puts loom where programs of their own find it, and what it
# installs holds up: the tree is complete and installing twice changes
# nothing, a prefix that cannot be written fails at once with a message that
# says what to do, every installed header compiles on its own under
# -Wall -Wextra -Werror (loom/loom.h included) with no `using namespace`,
# libloom.so carries its versioned SONAME and exports loom's symbols only,
# and the version a program compiles against is the one it runs with.
#
#   install_test.sh INSTALL_SH DIST_TAR
set -euo pipefail
install=$(realpath "$1")
dist=$(realpath "$2")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
fail() {
  echo "FAIL: $*"
  exit 1
}

# ---- install, twice ----
"$install" --from "$dist" --prefix "$PWD/prefix" > install1.log || { cat install1.log; fail "install"; }
snapshot() { (cd prefix && find . -printf '%y %m %p %l\n' | sort && find . -type f -exec md5sum {} + | sort); }
snapshot > tree1.txt
"$install" --from "$dist" --prefix "$PWD/prefix" > install2.log || { cat install2.log; fail "a second install"; }
snapshot > tree2.txt
diff tree1.txt tree2.txt || fail "installing twice changed the tree"
for f in include/loom/loom.h include/loom/version.h include/loom/tensor/tensor.h lib/libloom.so \
  lib/cmake/loom/loomConfig.cmake lib/cmake/loom/loomConfigVersion.cmake lib/pkgconfig/loom.pc; do
  [ -e "prefix/$f" ] || fail "$f was not installed"
done
[ ! -e prefix/lib/pkgconfig/loom.pc.in ] || fail "the .pc template was installed"
grep -q "^prefix=$PWD/prefix\$" prefix/lib/pkgconfig/loom.pc || fail "loom.pc does not name the prefix"
# A header removed from loom must not linger from an earlier install.
touch prefix/include/loom/stale.h
"$install" --from "$dist" --prefix "$PWD/prefix" > install3.log
[ ! -e prefix/include/loom/stale.h ] || fail "a stale header survived a reinstall"

# ---- bad input: clear messages, exit 1, nothing half-done ----
expect_failure() {  # expect_failure MESSAGE_PART COMMAND...
  local want=$1
  shift
  if "$@" > bad.log 2>&1; then cat bad.log; fail "'$*' succeeded"; fi
  grep -q -- "$want" bad.log || { cat bad.log; fail "'$*' did not say '$want'"; }
}
# A prefix in a folder we may not write to. Root may write anywhere, so then
# the install runs as nobody, from a copy of the script nobody can read.
locked=$(mktemp -d /tmp/loom_install_test.XXXXXX)
trap 'rm -rf "$locked"' EXIT
chmod 755 "$locked"
cp "$install" "$locked/install.sh"
mkdir "$locked/ro"
chmod 555 "$locked/ro"
as_user=()
if [ "$(id -u)" = 0 ]; then as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups); fi
expect_failure "cannot write to $locked/ro/usr (permission denied)" "${as_user[@]}" "$locked/install.sh" --from "$dist" --prefix "$locked/ro/usr"
grep -q -- "--prefix ~/.local" bad.log || { cat bad.log; fail "the message does not suggest a prefix of one's own"; }
[ -z "$(ls -A "$locked/ro")" ] || fail "a refused install left files behind"
expect_failure "must be an absolute folder" "$install" --from "$dist" --prefix relative/dir
expect_failure "no such file" "$install" --from "$PWD/missing.tar" --prefix "$PWD/other"
tar -cf not_loom.tar install1.log
expect_failure "is not loom's install tree" "$install" --from not_loom.tar --prefix "$PWD/other"
expect_failure "unknown argument '--prefx'" "$install" --prefx /tmp

inc=(-I"$PWD/prefix/include" -I"$PWD/prefix/include/loom")
# ---- the umbrella header, alone, warning-free as a program's own code ----
printf '#include <loom/loom.h>\n' > umbrella.cc
g++ -std=c++17 -Wall -Wextra -Werror "${inc[@]}" -c umbrella.cc -o umbrella.o || fail "loom/loom.h does not compile cleanly"

# ---- every installed header on its own ----
(cd prefix/include/loom && find . -name '*.h' | sed 's|^\./||' | sort) > headers.txt
[ "$(wc -l < headers.txt)" -gt 100 ] || fail "only $(wc -l < headers.txt) headers installed"
check_header() {  # check_header HEADER, with LOOM_INC the include flags
  local src
  src=$(mktemp --suffix=.cc)
  printf '#include "%s"\n' "$1" > "$src"
  # shellcheck disable=SC2086  # LOOM_INC is two flags
  g++ -std=c++17 -Wall -Wextra -Werror $LOOM_INC -fsyntax-only "$src" > "$src.log" 2>&1 ||
    { echo "$1 does not compile on its own:"; head -5 "$src.log"; rm -f "$src" "$src.log"; return 1; }
  rm -f "$src" "$src.log"
}
export -f check_header
export LOOM_INC="${inc[*]}"
xargs -P "$(nproc)" -I{} bash -c 'check_header "$1"' _ {} < headers.txt > headers.log ||
  { cat headers.log; fail "headers that do not compile on their own"; }
# Code, not comments: a `using namespace` at the start of a line.
if grep -rn '^\s*using namespace' prefix/include/loom; then fail "using namespace in an installed header"; fi
if grep -rn '#include "\(examples\|tests\|bench\)/' prefix/include/loom; then
  fail "installed headers include files that only the source tree has"
fi

# ---- the library: SONAME, and loom's own symbols exported, nothing else ----
version=$(sed -n 's/^version=//p' prefix/share/loom/buildinfo)
soversion=$(sed -n 's/^soversion=//p' prefix/share/loom/buildinfo)
cuda=$(sed -n 's/^cuda=//p' prefix/share/loom/buildinfo)
[ -f "prefix/lib/libloom.so.$version" ] || fail "no lib/libloom.so.$version"
[ "$(readlink prefix/lib/libloom.so)" = "libloom.so.$soversion" ] || fail "libloom.so does not point to libloom.so.$soversion"
readelf -d "prefix/lib/libloom.so.$version" | grep -q "Library soname: \[libloom.so.$soversion\]" ||
  fail "the SONAME is not libloom.so.$soversion"
nm -DC --defined-only "prefix/lib/libloom.so.$version" | cut -c20- > exported.txt
[ "$(grep -c 'loom::' exported.txt)" -gt 1000 ] || fail "loom's API is not exported ($(grep -c 'loom::' exported.txt) symbols)"
if grep -v 'loom::' exported.txt; then fail "libloom.so exports symbols that are not loom's (above)"; fi
# The CUDA libraries are linked exactly when the build says the backend is in.
if readelf -d "prefix/lib/libloom.so.$version" | grep -q 'libcudart'; then has_cudart=1; else has_cudart=0; fi
[ "$has_cudart" = "$cuda" ] || fail "buildinfo says cuda=$cuda, but libcudart linked: $has_cudart"

# ---- the version compiled against is the version run with ----
cat > version.cc <<'EOF'
#include <loom/loom.h>
#include <cstdio>
int main() {
  loom::BuildInfo info = loom::build_info();
  std::printf("%s %s %d.%d.%d %d\n", LOOM_VERSION, loom::version(), info.major, info.minor, info.patch, info.cuda);
}
EOF
g++ -std=c++17 -Wall -Wextra -Werror "${inc[@]}" version.cc -o version -L"$PWD/prefix/lib" -Wl,-rpath,"$PWD/prefix/lib" -lloom ||
  fail "a program using build_info() does not link"
[ "$(./version)" = "$version $version $version $cuda" ] || fail "version program printed '$(./version)', expected '$version $version $version $cuda'"
echo PASS
