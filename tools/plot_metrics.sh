#!/usr/bin/env bash
# Turns an example's metrics CSV into a PNG chart with gnuplot.
#
#   tools/plot_metrics.sh metrics.csv loss.png                  # every column against the first
#   tools/plot_metrics.sh metrics.csv loss.png step train_loss test_loss
#
# The CSV's first line names the columns. Each y column gets its own line;
# columns whose names end in "accuracy" go on a second axis (0 to 1).
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
csv=$1 png=$2
shift 2
[ -r "$csv" ] || { echo "plot_metrics: cannot read $csv" >&2; exit 1; }
# The chart must not replace its own data (the same file however spelled, also through links).
[ "$(realpath -m -- "$csv")" != "$(realpath -m -- "$(dirname -- "$png")")/$(basename -- "$png")" ] ||
  { echo "plot_metrics: the chart $png is the CSV $csv: give the PNG another name" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot_metrics: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
IFS=, read -r -a header < <(head -n 1 "$csv" | tr -d '\r')
x=${1:-${header[0]}}
[ $# -gt 0 ] && shift
ys=("$@")
if [ ${#ys[@]} -eq 0 ]; then
  for h in "${header[@]}"; do [ "$h" != "$x" ] && ys+=("$h"); done
fi
column() {  # 1-based index of a column name
  for i in "${!header[@]}"; do [ "${header[$i]}" = "$1" ] && { echo $((i + 1)); return; }; done
  echo "plot_metrics: no column '$1' in $csv (columns: ${header[*]})" >&2
  exit 1
}
xi=$(column "$x")
plots=()
for y in "${ys[@]}"; do
  yi=$(column "$y")
  axis=x1y1
  case $y in *accuracy) axis=x1y2 ;; esac
  plots+=("'$csv' using $xi:$yi with lines linewidth 2 axes $axis title '${y//_/ }'")
done
# As loom's AtomicFile: gnuplot draws into a new file of an unpredictable name
# (mktemp creates it exclusively, never through a planted link), which is
# then renamed over the PNG's name (replacing a link there, not writing
# where it points).
tmp=$(mktemp -- "$png.tmp-XXXXXXXX") || { echo "plot_metrics: cannot write $png" >&2; exit 1; }
trap 'rm -f -- "$tmp"' EXIT
gnuplot <<GNUPLOT
set terminal pngcairo size 900,500 noenhanced
set output '$tmp'
set datafile separator ','
set key outside right top
set grid
set xlabel '$x'
set y2range [0:1]
set y2tics
set ytics nomirror
plot $(IFS=,; echo "${plots[*]}")
GNUPLOT
mv -f -T -- "$tmp" "$png"
trap - EXIT
echo "plot_metrics: wrote $png"
