#!/usr/bin/env python3
"""Where a program's GPU time goes, kernel by kernel.

Sums the launches of each kernel in an Nsight Compute report taken with

    ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw PROGRAM ARGS > raw.csv
    python3 tools/kernel_profile.py raw.csv [--top N]

and prints one row per kernel name, the longest first (total ms, launches,
share of all kernels' time), then a JSON line with the totals. Lines that
are not the report (ncu's ==PROF== lines, the program's own output) are
skipped. ncu runs each kernel alone, so the times add up to the GPU's busy
time, not to the step's wall time: use it for shares, not for speed.
"""
import argparse
import collections
import csv
import json
import sys

METRIC = "gpu__time_duration.sum"
TO_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
         "second": 1e3, "s": 1e3}


def read_report(path):
    """Rows of the report as dicts, and the unit of the time column."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"kernel_profile: {path} holds no ncu CSV report (no header line starting with \"ID\"); "
                 f"take it with --csv --page raw --metrics {METRIC}")
    rows = list(csv.DictReader(line for line in lines[start:] if line.startswith('"')))
    header = rows[0].keys() if rows else []
    if METRIC not in header or "Kernel Name" not in header:
        sys.exit(f"kernel_profile: {path} has no '{METRIC}' or 'Kernel Name' column")
    unit = "nsecond"
    if rows and not rows[0]["ID"]:  # the units row
        unit = rows.pop(0)[METRIC]
    if unit not in TO_MS:
        sys.exit(f"kernel_profile: unknown time unit '{unit}' in {path}")
    return rows, TO_MS[unit]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("--top", type=int, default=25, help="kernels to list (default 25)")
    args = parser.parse_args()
    rows, to_ms = read_report(args.report)
    total_ms, launches = collections.Counter(), collections.Counter()
    for row in rows:
        value = row[METRIC].replace(",", "")
        try:
            ms = float(value) * to_ms
        except ValueError:
            sys.exit(f"kernel_profile: '{value}' is not a time (kernel {row['Kernel Name']})")
        total_ms[row["Kernel Name"]] += ms
        launches[row["Kernel Name"]] += 1
    if not total_ms:
        sys.exit(f"kernel_profile: {args.report} lists no kernel launches")
    gpu_ms = sum(total_ms.values())
    print(f"{'ms':>10} {'launches':>9} {'share':>6}  kernel")
    for name, ms in total_ms.most_common(args.top):
        print(f"{ms:10.3f} {launches[name]:9d} {ms / gpu_ms:6.1%}  {name[:120]}")
    print(json.dumps({"kernels": len(total_ms), "launches": sum(launches.values()), "gpu_ms": round(gpu_ms, 3)}))


if __name__ == "__main__":
    main()
