#!/usr/bin/env bash
# Installs the Debian packages loom needs, if any are missing (idempotent),
# and links the Bazel binary under the name Debian's wrapper looks for.
# Both README commands call it first.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-rules-java  # Bazel 4.2.3 and its Java rules
  g++ python3                       # compiler; test-result counting
  libeigen3-dev                     # CPU math
  libgtest-dev libbenchmark-dev     # tests and benchmarks
  nlohmann-json3-dev libcli11-dev   # checkpoints and traces; command-line flags
  zlib1g-dev                        # gzip'd IDX files
  libopenmpi-dev openmpi-bin        # multi-process training on CPU
  gnuplot-nox                       # loss-curve and comparison charts
  dataset-fashion-mnist fortunes    # the examples' data
  strace iproute2                   # tests: kills at chosen writes; two hosts as network namespaces
  cmake pkg-config dpkg-dev         # tests: programs of your own against an installed loom, its .deb
  python3-protobuf                  # tests: TensorBoard event files read by an independent decoder
  slurmctld slurmd slurm-client munge  # tests: a one-node Slurm cluster of their own runs a batch job
)

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Debian's /usr/bin/bazel wrapper runs /usr/bin/bazel-<version in .bazelversion>,
# but the package installs the binary as bazel-4.
version=$(cat "$(dirname "$0")/../.bazelversion")
if [ ! -x "/usr/bin/bazel-$version" ]; then
  $SUDO ln -sf bazel-4 "/usr/bin/bazel-$version"
fi

# Bazel 4 never evicts from the disk cache .bazelrc names: keep it under a cap.
bash "$(dirname "$0")/prune_disk_cache.sh"
