#!/usr/bin/env bash
# Installs loom for programs of your own: headers under PREFIX/include/loom,
# libloom.so.<version> under PREFIX/lib, a CMake package (lib/cmake/loom:
# find_package(loom CONFIG REQUIRED) -> loom::loom) and lib/pkgconfig/loom.pc.
#
#   tools/install.sh                          # builds, installs into /usr/local (needs root)
#   tools/install.sh --prefix ~/.local        # no root needed
#   tools/install.sh --cpu-only --prefix DIR  # without the CUDA backend (--//:cuda=false)
#   tools/install.sh --from bazel-bin/dist.tar --prefix DIR   # an already built //:dist
#   tools/install.sh --destdir /tmp/root --prefix /usr        # staged, as packages do
#
# Installing again replaces include/loom and lib/cmake/loom wholly (no stale
# headers), and overwrites the rest; another version's libloom.so.<version>
# stays for the programs linked to it. See docs/architecture.md, "loom as a library".
set -euo pipefail
umask 022  # installed files are readable by every user of the prefix

usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}
die() {
  echo "install.sh: $*" >&2
  exit 1
}

prefix=/usr/local
destdir=""
from=""
bazel_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || die "--prefix needs a folder"; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --destdir) [ $# -ge 2 ] || die "--destdir needs a folder"; destdir=$2; shift 2 ;;
    --destdir=*) destdir=${1#*=}; shift ;;
    --from) [ $# -ge 2 ] || die "--from needs a tar built by //:dist"; from=$2; shift 2 ;;
    --from=*) from=${1#*=}; shift ;;
    --cpu-only) bazel_flags+=(--//:cuda=false); shift ;;
    -h | --help) usage 0 ;;
    *) echo "install.sh: unknown argument '$1'" >&2; usage 2 >&2 ;;
  esac
done

# The .pc file and the printed hints name the prefix: it must be absolute.
case "$prefix" in
  /*) ;;
  *) die "--prefix must be an absolute folder, got '$prefix'" ;;
esac
prefix=${prefix%/}
[ -n "$prefix" ] || prefix=/
target="$destdir$prefix"

# Find out now, before a build, whether we may write there: the nearest
# existing folder on the way must be writable.
probe=$target
while [ ! -e "$probe" ]; do probe=$(dirname "$probe"); done
if [ ! -d "$probe" ]; then
  die "cannot install into $target: $probe is not a folder"
fi
if [ ! -w "$probe" ] || { [ -e "$target/lib" ] && [ ! -w "$target/lib" ]; } ||
  { [ -e "$target/include" ] && [ ! -w "$target/include" ]; }; then
  die "cannot write to $target (permission denied): run it as root (sudo), or choose a folder of your own, e.g. --prefix ~/.local"
fi

if [ -z "$from" ]; then
  cd "$(dirname "$0")/.."
  echo "install.sh: building //:dist ${bazel_flags[*]}"
  bazel build "${bazel_flags[@]}" //:dist
  from=bazel-bin/dist.tar
fi
[ -f "$from" ] || die "$from: no such file (build it with: bazel build //:dist)"
tar -tf "$from" ./share/loom/buildinfo >/dev/null 2>&1 ||
  die "$from is not loom's install tree (bazel build //:dist makes one)"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
tar -xf "$from" -C "$stage"
version=$(sed -n 's/^version=//p' "$stage/share/loom/buildinfo")

# pkg-config: the prefix, and a run path to the library outside the folders
# the loader searches by itself (so ~/.local needs no LD_LIBRARY_PATH).
rpath="-Wl,-rpath,\${libdir} "
case "$prefix" in /usr | /usr/local) rpath="" ;; esac
sed -e "s|@PREFIX@|$prefix|; s|@RPATH@|$rpath|" "$stage/lib/pkgconfig/loom.pc.in" >"$stage/lib/pkgconfig/loom.pc"
rm "$stage/lib/pkgconfig/loom.pc.in"

mkdir -p "$target"
rm -rf "$target/include/loom" "$target/lib/cmake/loom"
# New files rather than writes into old ones: a program running with the old
# library keeps its copy.
cp -R --no-preserve=ownership --remove-destination "$stage/." "$target/"

# The loader's cache, for /usr/local/lib (a staged install leaves it to its package).
if [ -z "$destdir" ] && [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then
  ldconfig
fi

cat <<EOF
install.sh: loom $version installed into $target
  CMake:      find_package(loom CONFIG REQUIRED)  (-DCMAKE_PREFIX_PATH=$prefix)
  pkg-config: g++ app.cc \$(pkg-config --cflags --libs loom)  (PKG_CONFIG_PATH=$prefix/lib/pkgconfig)
EOF
