#!/usr/bin/env bash
# Builds loom as a Debian package: loom_<version>_<arch>.deb with libloom.so,
# the headers, the CMake package and loom.pc under /usr, and the Debian
# packages it needs declared (found by dpkg-shlibdeps from the library's links,
# plus libopenmpi-dev, whose libmpi.so a program links too).
#
#   tools/package_deb.sh                        # builds //:dist, writes the .deb here
#   tools/package_deb.sh --cpu-only             # without the CUDA backend (--//:cuda=false)
#   tools/package_deb.sh --from bazel-bin/dist.tar --output DIR
#   sudo apt-get install ./loom_0.1.0_amd64.deb
#
# A build with the CUDA backend links the toolkit under its own folder
# (/usr/local/cuda), which no Debian package provides: the package says so in
# its description, and find_package(loom) names a missing CUDA library.
set -euo pipefail
umask 022

die() {
  echo "package_deb.sh: $*" >&2
  exit 1
}

here=$(cd "$(dirname "$0")" && pwd)
from=""
output=$PWD
bazel_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --from) [ $# -ge 2 ] || die "--from needs a tar built by //:dist"; from=$2; shift 2 ;;
    --from=*) from=${1#*=}; shift ;;
    --output) [ $# -ge 2 ] || die "--output needs a folder"; output=$2; shift 2 ;;
    --output=*) output=${1#*=}; shift ;;
    --cpu-only) bazel_flags+=(--//:cuda=false); shift ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for tool in dpkg-deb dpkg-shlibdeps dpkg-architecture; do
  command -v "$tool" >/dev/null || die "$tool is missing: apt-get install dpkg-dev"
done
[ -d "$output" ] && [ -w "$output" ] || die "cannot write the package into $output"
output=$(cd "$output" && pwd)

if [ -z "$from" ]; then
  (cd "$here/.." && bazel build "${bazel_flags[@]}" //:dist)
  from=$here/../bazel-bin/dist.tar
fi
from=$(realpath "$from")

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/debian/loom  # where dpkg-shlibdeps expects a package's files
"$here/install.sh" --from "$from" --destdir "$root" --prefix /usr >/dev/null
buildinfo=$root/usr/share/loom/buildinfo
version=$(sed -n 's/^version=//p' "$buildinfo")
cuda=$(sed -n 's/^cuda=//p' "$buildinfo")
arch=$(dpkg-architecture -qDEB_HOST_ARCH)

# Runtime dependencies from the library's own links, as Debian's packages
# compute them; libraries outside any package (CUDA's) are left to the note.
printf 'Source: loom\n\nPackage: loom\nArchitecture: any\n' > "$stage/debian/control"
depends=$(cd "$stage" && dpkg-shlibdeps --ignore-missing-info -O "debian/loom/usr/lib/libloom.so.$version" 2>shlibdeps.log |
  sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { cat "$stage/shlibdeps.log" >&2; die "dpkg-shlibdeps found no dependencies of libloom.so.$version"; }
depends="$depends, libopenmpi-dev"

backends="CPU"
cuda_note=""
if [ "$cuda" = 1 ]; then
  backends="CPU and CUDA"
  cuda_note="
 This build has the CUDA backend: it needs the CUDA toolkit (cuBLAS, cuDNN,
 NCCL) it was built with under $(sed -n 's/^cuda_root=//p' "$buildinfo")."
fi
mkdir -p "$root/DEBIAN"
cat > "$root/DEBIAN/control" <<EOF
Package: loom
Version: $version
Architecture: $arch
Maintainer: loom developers <loom@localhost>
Section: libdevel
Priority: optional
Depends: $depends
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Description: deep learning from C++ with parallel training built in ($backends)
 Tensors, autograd, nn, optim, data and parallel training (DDP, ZeRO, FSDP,
 tensor, sequence, context and pipeline parallelism over MPI and threads)
 as one library, libloom.so, with its headers (#include <loom/loom.h>), a
 CMake package (find_package(loom CONFIG REQUIRED) -> loom::loom) and
 loom.pc for pkg-config.$cuda_note
EOF
# A shared library in the loader's folders: refresh its cache after install.
echo "activate-noawait ldconfig" > "$root/DEBIAN/triggers"

deb=$output/loom_${version}_${arch}.deb
dpkg-deb --root-owner-group --build "$root" "$deb.partial" >/dev/null
mv "$deb.partial" "$deb"  # a reader never sees half a package
echo "package_deb.sh: $deb"
echo "  install: sudo apt-get install $deb"
