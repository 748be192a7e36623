#!/usr/bin/env bash
# Keeps Bazel's disk cache (.bazelrc: ~/.cache/loom-bazel) under a cap.
#
# Bazel 4 never evicts anything from a disk cache: on the build machine it
# grew to 58 GB over many builds and filled the disk in the middle of one.
# When the cache holds more than LOOM_DISK_CACHE_MB (default 20480, 20 GB),
# its least recently written files go until it holds half of that. A build
# then misses on what was dropped and writes it again; nothing else changes.
# tools/setup.sh runs it before every build of the README's two commands.
set -euo pipefail
cache="${LOOM_DISK_CACHE:-$HOME/.cache/loom-bazel}"
cap_mb="${LOOM_DISK_CACHE_MB:-20480}"
[ -d "$cache" ] || exit 0
cap=$((cap_mb * 1024 * 1024))
bytes_in() { find "$1" -type f -printf '%s\n' | awk '{ n += $1 } END { printf "%.0f\n", n }'; }
used=$(bytes_in "$cache")
[ "$used" -gt "$cap" ] || exit 0
excess=$((used - cap / 2))
echo "setup: the disk cache $cache holds $((used >> 20)) MB, over $cap_mb MB: dropping its oldest entries"
# "mtime size path", oldest first; drop files until `excess` bytes are gone.
# awk reads to the end: leaving early would kill sort with SIGPIPE, and
# pipefail would fail the script (and setup.sh) once the list outgrows a pipe.
find "$cache" -type f -printf '%T@ %s %p\n' | sort -n |
  awk -v excess="$excess" 'dropped < excess { dropped += $2; sub(/^[^ ]+ [^ ]+ /, ""); print }' |
  while IFS= read -r file; do rm -f -- "$file"; done
echo "setup: the disk cache now holds $(($(bytes_in "$cache") >> 20)) MB"
