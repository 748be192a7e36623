#!/usr/bin/env python3
"""Summarises compare_torch.sh's rounds: per model and reference, each side's
median ms a step and its spread, the ratio of the medians, and the machine's
GEMM rate measured by loom's lines in the same call; with an earlier build's
rounds (framework "loom_base", compare_torch.sh's LOOM_BASE_BIN), its median
and this build's speed-up over it.

Reads the JSON lines (loom's train_bench and torch_reference.py, in any
order) on stdin; prints one JSON object a model and reference. A ratio above
1 means loom is faster. The spread is (max - min) / median of a side's rounds:
a ratio whose sides each spread by 40% says more about the machine's hour
than about either framework. The ratio of the two sides' best rounds is
printed beside it: on a shared machine a side's best round is the one that
others' work disturbed least.

Each round runs both sides back to back, so a round's own ratio (PyTorch's
ms over loom's) sees one stretch of the machine's time: the summary gives
the median of these paired ratios and a distribution-free interval for it
(below). "paired_ratio_interval" [lo, hi] holds the true median with the
probability "paired_ratio_coverage" (at least 0.9) whatever the noise's
distribution, provided the rounds are independent; a target such as 1.5x
is met with that confidence when lo >= 1.5, and missed when hi < 1.5.
Fewer than 5 rounds give no such interval.
"""
import json
import math
import statistics
import sys


def spread(ms, median):
    return round((max(ms) - min(ms)) / median, 3)


def median_interval(values, confidence=0.9):
    """The widest-trimmed order statistics (x_(k), x_(n+1-k)) that hold the
    median with at least `confidence`: each value lies below the median with
    probability 1/2, so the interval misses it only when k or more of the n
    fall on one side, 2 P(Binomial(n, 1/2) <= k - 1). Returns (lo, hi,
    coverage), or None when even (min, max) falls short."""
    n = len(values)
    ordered = sorted(values)
    best = None
    for k in range(1, n // 2 + 1):
        outside = 2 * sum(math.comb(n, i) for i in range(k)) / 2**n
        if 1 - outside < confidence:
            break
        best = (ordered[k - 1], ordered[n - k], 1 - outside)
    return best


def paired_summary(name, slower_ms, loom_ms):
    """Round by round ratios slower / loom (round i's lines are the i-th of
    each side: every round adds one of each), their median, and its interval."""
    paired = [s / l for s, l in zip(slower_ms, loom_ms)]
    out = {f"{name}_median": round(statistics.median(paired), 3)}
    interval = median_interval(paired)
    if interval:
        out[f"{name}_interval"] = [round(interval[0], 3), round(interval[1], 3)]
        out[f"{name}_coverage"] = round(interval[2], 3)
    return out


def main():
    loom, base, torch, gemm = {}, {}, {}, {}
    for line in sys.stdin:
        line = line.strip()
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        if "ratio_loom_over_torch" in row:
            continue
        key = (row["model"], row.get("precision", "fp32"), row.get("threads"))
        if row.get("framework") == "loom":
            loom.setdefault(key, []).append(row["ms_per_step"])
            if "gemm_gflops" in row:
                gemm.setdefault(key, []).append(row["gemm_gflops"])
        elif row.get("framework") == "loom_base":
            base.setdefault(key, []).append(row["ms_per_step"])
        elif row.get("framework") == "torch":
            ref = f"torch {row['torch_version']} ({row.get('gpu') or row.get('blas')})"
            torch.setdefault((key, ref), []).append(row["ms_per_step"])
    for (key, ref), torch_ms in torch.items():
        if key not in loom:
            continue
        loom_ms = loom[key]
        lm, tm = statistics.median(loom_ms), statistics.median(torch_ms)
        out = {"model": key[0], "precision": key[1], "threads": key[2], "reference": ref, "rounds": len(loom_ms),
               "loom_ms_median": round(lm, 3), "loom_spread": spread(loom_ms, lm),
               "torch_ms_median": round(tm, 3), "torch_spread": spread(torch_ms, tm),
               "ratio_of_medians": round(tm / lm, 3), "ratio_of_best": round(min(torch_ms) / min(loom_ms), 3)}
        out.update(paired_summary("paired_ratio", torch_ms, loom_ms))
        if key in base:
            bm = statistics.median(base[key])
            out.update({"base_ms_median": round(bm, 3), "base_spread": spread(base[key], bm),
                        "speedup_over_base": round(bm / lm, 3), "speedup_over_base_best": round(min(base[key]) / min(loom_ms), 3)})
            out.update(paired_summary("speedup_over_base_paired", base[key], loom_ms))
        if key in gemm:
            out["gemm_gflops_median"] = round(statistics.median(gemm[key]), 1)
        print(json.dumps(out))


if __name__ == "__main__":
    main()
