#!/usr/bin/env bash
# prune_disk_cache.sh keeps a cache under its cap by dropping the least
# recently written files until half the cap is left, and leaves a cache
# under the cap (or none at all) alone; sizes past 2^32 bytes count right.
set -euo pipefail
prune=$(realpath "$1")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
mkdir -p cache/cas/ab "cache/ac/with space"
for i in 0 1 2 3 4 5 6 7 8 9; do  # ten 1 MB entries, entry 0 the oldest
  dir=cache/cas/ab; [ "$i" = 5 ] && dir="cache/ac/with space"
  head -c 1048576 /dev/zero > "$dir/entry$i"
  touch -d "2026-01-01 00:0$i:00" "$dir/entry$i"
done
LOOM_DISK_CACHE=cache LOOM_DISK_CACHE_MB=20 "$prune" > untouched.log
[ "$(find cache -type f | wc -l)" = 10 ] || { echo "a cache under its cap lost files"; cat untouched.log; exit 1; }
LOOM_DISK_CACHE=cache LOOM_DISK_CACHE_MB=6 "$prune" > pruned.log
left=$(find cache -type f -printf '%f\n' | sort | tr '\n' ' ')
[ "$left" = "entry7 entry8 entry9 " ] || { echo "expected the three newest entries to stay, got: $left"; cat pruned.log; exit 1; }
grep -q "over 6 MB: dropping its oldest entries" pruned.log || { cat pruned.log; exit 1; }
LOOM_DISK_CACHE=no_such_dir "$prune" || { echo "a missing cache is not an error"; exit 1; }
# Sizes past 2^32 bytes (sparse files: no disk used): 9 GB against a cap of
# 8 GB leaves the newest 3 GB entry.
mkdir big
for i in 1 2 3; do truncate -s 3G "big/blob$i"; touch -d "2026-01-01 00:0$i:00" "big/blob$i"; done
LOOM_DISK_CACHE=big LOOM_DISK_CACHE_MB=8192 "$prune" > big.log
[ "$(ls big)" = "blob3" ] || { echo "expected only the newest 3 GB entry to stay, got: $(ls big)"; cat big.log; exit 1; }
# A cache of many entries, whose list outgrows a pipe's buffer (64 KB)
# after the dropped ones: 4000 entries of 1 KB with long paths, capped at
# 3 MB. The script must read the list to its end and exit 0 (it once left
# early, sort died of SIGPIPE, and pipefail failed setup.sh with it).
many="many/cas/a_directory_whose_long_name_makes_each_line_of_the_list_long"
mkdir -p "$many"
(cd "$many" && head -c 4096000 /dev/zero | split -b 1024 -a 4 - entry_with_a_long_name_)
LOOM_DISK_CACHE=many LOOM_DISK_CACHE_MB=3 "$prune" > many.log || { echo "failed on a long list:"; cat many.log; exit 1; }
left=$(find many -type f | wc -l)
[ "$left" -le 1536 ] && [ "$left" -gt 0 ] || { echo "expected at most 1.5 MB of 1 KB entries to stay, got $left"; exit 1; }
grep -q "now holds" many.log || { cat many.log; exit 1; }
echo PASS
