#!/usr/bin/env python3
"""Exit 0 when two training checkpoints hold the same training state.

Usage: same_training_state.py A.safetensors B.safetensors [A.csv B.csv]

The same tensors (names, dtypes, shapes, bytes), the same metadata, and the
same metrics rows, except for the columns that time the run (samples_per_s,
seconds), which two runs never share. With two CSVs, they must hold the
checkpoint's rows (B's) on both sides, compared the same way.
"""
import csv
import io
import json
import struct
import sys

TIMING = {"samples_per_s", "seconds"}


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n :]
    tensors = {k: (v["dtype"], v["shape"], body[v["data_offsets"][0] : v["data_offsets"][1]]) for k, v in header.items()}
    return tensors, meta


def rows(text):
    table = list(csv.DictReader(io.StringIO(text)))
    return [{k: v for k, v in r.items() if k not in TIMING} for r in table]


def fail(why):
    print("training states differ:", why)
    sys.exit(1)


def main():
    a, meta_a = read(sys.argv[1])
    b, meta_b = read(sys.argv[2])
    if a.keys() != b.keys():
        fail(f"tensors {sorted(a.keys() ^ b.keys())} are in one file only")
    for name in a:
        if a[name] != b[name]:
            fail(f"tensor {name}")
    # The checksums of the metadata cover the timing columns too; the tensors' are compared above.
    plain = lambda m: {k: v for k, v in m.items() if k not in ("metrics_csv", "loom.crc32:__metadata__")}
    if plain(meta_a) != plain(meta_b):
        fail(f"metadata {plain(meta_a)} vs {plain(meta_b)}")
    if rows(meta_a["metrics_csv"]) != rows(meta_b["metrics_csv"]):
        fail("metrics rows in the checkpoints")
    for path in sys.argv[3:]:
        with open(path) as f:
            if rows(f.read()) != rows(meta_b["metrics_csv"]):
                fail(f"{path} does not hold the checkpoint's rows")


main()
