#!/usr/bin/env python3
"""Compares the planner's per-rank peak memory with compare_parallel's measurement.

Usage: plan_check.py PLAN.jsonl MEASURED.jsonl {threads|mpirun} [TOLERANCE]

Both files hold one JSON object a strategy (bench/plan --json, compare_parallel's
lines). compare_parallel's peak counts what was allocated before the strategy
began (the workload's own model and batch, "outside_bytes"); that is taken off.

Under mpirun each rank is a process, and the largest rank's peak is set against
the plan's peak_bytes: it must be within TOLERANCE (0.15) of it. A pipeline
stage may or may not still hold, at its peak, a gradient it sent back that the
stage before has not yet taken (the plan's pending_send_bytes, counted in
peak_bytes), as the ranks' timing falls; so the measurement may also be that
much lower.

With threads every rank shares one allocator, so the measured peak is what the
ranks held together at one moment. The plan's all_ranks_bytes adds every
rank's peak: the most they can hold together, reached when they peak at the
same moment, which is what usually happens. But a rank whose thread the
machine's other work delays peaks while the others are elsewhere in their
step, where each still holds its parameters and optimizer state (the plan's
"kept" bytes; gradients are dropped by zero_grad). So the shared peak lies
between all_ranks_bytes - (ranks - 1) * (peak_bytes - kept) and
all_ranks_bytes (for two ranks, or ranks alike, that lower end is a true
bound), less the pending send as above, and the measurement must fall in that
range, widened by TOLERANCE.
The error printed is against the plan's peak (all_ranks_bytes under threads),
and "to range" how far outside the range the measurement is (0 inside).

Prints a table; exits 1 when a strategy falls outside.
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


def expected_range(plan_row, shared):
    """The lowest and highest peak the plan allows for a measurement."""
    pending = plan_row.get("pending_send_bytes", 0)
    if not shared:
        return plan_row["peak_bytes"] - pending, plan_row["peak_bytes"]
    highest = plan_row["all_ranks_bytes"]
    kept = plan_row["parameters_bytes"] + plan_row["optimizer_bytes"]
    lowest = highest - (plan_row["ranks"] - 1) * max(0, plan_row["peak_bytes"] - kept) - pending
    return lowest, highest


def main():
    plan, measured, mode = rows(sys.argv[1], "plan"), rows(sys.argv[2], "compare_parallel"), sys.argv[3]
    tolerance = float(sys.argv[4]) if len(sys.argv) > 4 else 0.15
    both = [s for s in measured if s in plan]
    if not both:
        print("no strategy both planned and measured")
        return 1
    failed = False
    print(f"{'strategy':10} {'predicted MiB':>14} {'lowest MiB':>11} {'measured MiB':>13} {'error':>7} {'to range':>9}")
    for s in both:
        lowest, highest = expected_range(plan[s], shared=mode == "threads" and s != "single")
        got = measured[s]["peak_bytes"] - measured[s].get("outside_bytes", 0)
        error = highest / got - 1 if got > 0 else float("inf")
        # The range's ends as errors against the measurement, as in the error column; 0 inside it.
        beyond = 0.0 if got <= 0 or lowest <= got <= highest else (lowest if got < lowest else highest) / got - 1
        inside = got > 0 and abs(beyond) <= tolerance
        failed |= not inside
        low = f"{lowest / 2**20:11.2f}" if lowest != highest else f"{'':11}"
        print(f"{s:10} {highest / 2**20:14.2f} {low} {got / 2**20:13.2f} {100 * error:+6.1f}% {100 * beyond:+8.1f}%"
              f"{'' if inside else '  OUTSIDE'}")
    print(f"each within {100 * tolerance:.0f}% of its range" if not failed else "some outside their range")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
