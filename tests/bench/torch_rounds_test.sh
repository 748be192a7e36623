#!/usr/bin/env bash
# bench/torch_rounds.py's summary of compare_torch.sh's rounds, on made-up
# lines whose answers are worked out by hand: the ratio of medians, the
# round-by-round (paired) ratios' median and its distribution-free interval,
# and the same against an earlier build's rounds.
set -euo pipefail
rounds=$(realpath "$1")
python3 - "$rounds" <<'PY'
import json, subprocess, sys

def loom(ms, framework="loom"):
    return {"framework": framework, "model": "gpt", "precision": "fp32", "threads": 1, "ms_per_step": ms,
            "gemm_gflops": 90.0}

def torch(ms):
    return {"framework": "torch", "torch_version": "2.15.0", "blas": "mkl", "gpu": "", "model": "gpt",
            "precision": "fp32", "threads": 1, "ms_per_step": ms}

def summarise(lines):
    text = "\n".join(json.dumps(l) for l in lines) + "\nnot json: ignored\n"
    out = subprocess.run([sys.executable, sys.argv[1]], input=text, capture_output=True, text=True, check=True).stdout
    rows = [json.loads(l) for l in out.splitlines()]
    assert len(rows) == 1, out
    return rows[0]

failures = []
def expect(what, got, want):
    ok = abs(got - want) < 1e-9 if isinstance(want, float) else got == want
    if not ok:
        failures.append(f"{what}: got {got}, want {want}")

# Nine rounds whose machine alternates between a calm (loom 10 ms) and a
# slow (12 ms) stretch; PyTorch's step is loom's times the round's ratio,
# and the ratios, in round order, are 1.5 1.1 1.9 1.3 1.7 1.2 1.8 1.4 1.6.
ratios = [1.5, 1.1, 1.9, 1.3, 1.7, 1.2, 1.8, 1.4, 1.6]
loom_ms = [10.0 if i % 2 == 0 else 12.0 for i in range(9)]
base_ms = [l * 1.25 for l in loom_ms]
lines = []
for l, b, r in zip(loom_ms, base_ms, ratios):
    lines += [loom(l), loom(b, "loom_base"), torch(l * r)]
row = summarise(lines)
# Medians: loom 10 (five calm rounds); PyTorch's nine values sorted are
# 13.2 14.4 15 15.6 16 16.8 17 18 19, median 16: a ratio of medians of 1.6,
# where the paired ratios' median is 1.5. (Pairing the sorted sides instead
# of the rounds would give 1.32 ... 1.6 and the interval below 1.4 - 1.583.)
expect("loom_ms_median", row["loom_ms_median"], 10.0)
expect("torch_ms_median", row["torch_ms_median"], 16.0)
expect("ratio_of_medians", row["ratio_of_medians"], 1.6)
expect("paired_ratio_median", row["paired_ratio_median"], 1.5)
# n = 9: (x_(2), x_(8)) misses the median only when 0 or 1 of the nine
# fall on one side: 2 (1 + 9) / 512, coverage 492/512 = 0.961; (x_(3), x_(7))
# would miss with 2 (1 + 9 + 36) / 512, coverage 0.82, below 0.9.
expect("paired_ratio_interval", row["paired_ratio_interval"], [1.2, 1.8])
expect("paired_ratio_coverage", row["paired_ratio_coverage"], 0.961)
expect("speedup_over_base", row["speedup_over_base"], 1.25)
expect("speedup_over_base_paired_median", row["speedup_over_base_paired_median"], 1.25)
expect("speedup_over_base_paired_interval", row["speedup_over_base_paired_interval"], [1.25, 1.25])

# Five rounds: only (min, max), coverage 1 - 2/32 = 0.9375.
row = summarise([x for l, r in zip([10.0] * 5, [1.4, 1.6, 1.5, 1.3, 1.7]) for x in (loom(l), torch(l * r))])
expect("five rounds: interval", row["paired_ratio_interval"], [1.3, 1.7])
expect("five rounds: coverage", row["paired_ratio_coverage"], 0.938)

# Four rounds: even (min, max) covers only 1 - 2/16 = 0.875; no interval.
row = summarise([x for r in [1.4, 1.6, 1.5, 1.3] for x in (loom(10.0), torch(10.0 * r))])
expect("four rounds: median", row["paired_ratio_median"], 1.45)
expect("four rounds: no interval", "paired_ratio_interval" in row, False)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("torch_rounds: all checks passed")
PY
