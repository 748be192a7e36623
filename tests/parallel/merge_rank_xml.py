#!/usr/bin/env python3
"""Merges the GoogleTest XML of every rank of an mpirun'd test into one file.

Rank 0's file is the base. A test case that failed on another rank gets that
rank's failures added, so it counts as failed. A rank without a file, or a
nonzero mpirun status with no failure recorded, adds a failing test case, so a
crash never disappears from the count.
"""
import argparse
import os
import sys
import xml.etree.ElementTree as ET


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--status", type=int, required=True, help="mpirun's exit status")
    parser.add_argument("--np", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("xml_dir")
    args = parser.parse_args()

    trees = {}
    for rank in range(args.np):
        path = os.path.join(args.xml_dir, f"rank{rank}.xml")
        if os.path.exists(path):
            trees[rank] = ET.parse(path)

    base = trees[min(trees)] if trees else ET.ElementTree(ET.Element("testsuites", name="AllTests"))
    root = base.getroot()
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}

    for rank, tree in sorted(trees.items()):
        if tree is base:
            continue
        for case in tree.getroot().iter("testcase"):
            target = cases.get((case.get("classname"), case.get("name")))
            for failure in case.findall("failure"):
                failure.set("message", f"rank {rank}: " + failure.get("message", ""))
                if target is not None:
                    target.append(failure)

    def add_failure(name, message):
        suite = ET.SubElement(root, "testsuite", name="MpiRun", tests="1", failures="1")
        case = ET.SubElement(suite, "testcase", name=name, classname="MpiRun", status="run")
        ET.SubElement(case, "failure", message=message).text = message

    for rank in range(args.np):
        if rank not in trees:
            add_failure(f"rank{rank}_results", f"rank {rank} wrote no test results (it crashed or was killed)")
    failed = any(c.find("failure") is not None for c in root.iter("testcase"))
    if args.status != 0 and not failed:
        add_failure("mpirun_status", f"mpirun exited with status {args.status}")

    for suite in root.iter("testsuite"):
        suite.set("failures", str(sum(c.find("failure") is not None for c in suite.iter("testcase"))))
    base.write(args.out, encoding="UTF-8", xml_declaration=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
