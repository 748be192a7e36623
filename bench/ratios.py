#!/usr/bin/env python3
"""Reads Google Benchmark JSON on stdin; prints loom/reference time per op and size.

Benchmarks pair up by name: BM_<op>_loom/<arg> against BM_<op>_<reference>/<arg>.
A ratio of 1.10 means loom took 10% longer than the reference.
"""
import json
import sys

results = {b["name"].replace("/real_time", ""): b["real_time"] for b in json.load(sys.stdin)["benchmarks"]
           if b.get("run_type", "iteration") == "iteration"}
rows = []
for name, loom_time in results.items():
    if "_loom/" not in name:
        continue
    op, arg = name[len("BM_"):].split("_loom/")
    for ref_name, ref_time in results.items():
        if ref_name.startswith(f"BM_{op}_") and ref_name.endswith("/" + arg) and ref_name != name:
            reference = ref_name[len(f"BM_{op}_"):].split("/")[0]
            rows.append({"op": op, "size": int(arg), "reference": reference,
                         "loom_ms": round(loom_time, 4), "reference_ms": round(ref_time, 4),
                         "ratio": round(loom_time / ref_time, 3)})
for row in rows:
    print(json.dumps(row))
