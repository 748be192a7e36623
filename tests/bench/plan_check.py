#!/usr/bin/env python3
"""Compares the planner's per-rank peak memory with compare_parallel's measurement.

Usage: plan_check.py PLAN.jsonl MEASURED.jsonl {threads|mpirun} [TOLERANCE]

Both files hold one JSON object a strategy (bench/plan --json, compare_parallel's
lines). compare_parallel's peak counts what was allocated before the strategy
began (the workload's own model and batch, "outside_bytes"); that is taken off.
With threads every rank shares one allocator, so the measured peak is all
ranks' together and is set against the plan's all_ranks_bytes; under mpirun
each rank is a process, and the largest rank's peak against the plan's.
Prints a table; exits 1 when a strategy is off by more than TOLERANCE (0.15).
"""
import json
import sys


def rows(path, bench):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                row = json.loads(line)
                if row.get("bench") == bench:
                    out[row["strategy"]] = row
    return out


def main():
    plan, measured, mode = rows(sys.argv[1], "plan"), rows(sys.argv[2], "compare_parallel"), sys.argv[3]
    tolerance = float(sys.argv[4]) if len(sys.argv) > 4 else 0.15
    both = [s for s in measured if s in plan]
    if not both:
        print("no strategy both planned and measured")
        return 1
    worst = 0.0
    print(f"{'strategy':10} {'predicted MiB':>14} {'measured MiB':>13} {'error':>7}")
    for s in both:
        p, m = plan[s], measured[s]
        predicted = p["peak_bytes"] if (mode == "mpirun" or s == "single") else p["all_ranks_bytes"]
        got = m["peak_bytes"] - m.get("outside_bytes", 0)
        error = predicted / got - 1 if got > 0 else float("inf")
        worst = max(worst, abs(error))
        flag = "" if abs(error) <= tolerance else "  OUTSIDE"
        print(f"{s:10} {predicted / 2**20:14.2f} {got / 2**20:13.2f} {100 * error:+6.1f}%{flag}")
    print(f"worst {100 * worst:.1f}% (tolerance {100 * tolerance:.0f}%)")
    return 0 if worst <= tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
