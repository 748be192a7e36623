#!/usr/bin/env python3
"""Prints 'N passed, N failed, N skipped' from the GoogleTest XML of every test target.

A target that left no XML (it failed to build or crashed before writing it)
counts as one failed test, so a broken target never disappears from the count.
"""
import os
import subprocess
import sys
import xml.etree.ElementTree as ET


def main():
    targets = subprocess.run(["bazel", "query", "tests(//...)"], capture_output=True, text=True,
                             check=True).stdout.split()
    testlogs = os.path.realpath("bazel-testlogs")
    passed = failed = skipped = 0
    missing = []
    for target in targets:
        package, name = target.lstrip("/").split(":")
        xml = os.path.join(testlogs, package, name, "test.xml")
        if not os.path.exists(xml):
            failed += 1
            missing.append(target)
            continue
        for case in ET.parse(xml).getroot().iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif case.get("result") == "skipped" or case.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
    for target in missing:
        print(f"no test results for {target} (did it build?)", file=sys.stderr)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
