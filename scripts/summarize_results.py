#!/usr/bin/env python3
"""Counts JUnit XML results of every suite and prints `N passed, M failed` (exit 1 on failure).

A suite whose report is missing (it crashed or never built) counts as one failure, so a broken
suite can never look green.
"""
import sys
import xml.etree.ElementTree as ET


def count(path):
    root = ET.parse(path).getroot()
    passed = failed = skipped = 0
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None or case.get("result") == "skipped":
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


def main(paths):
    total_passed = total_failed = total_skipped = 0
    for path in paths:
        try:
            passed, failed, skipped = count(path)
        except (OSError, ET.ParseError) as error:
            print(f"{path}: no report ({error}); counted as 1 failure")
            passed, failed, skipped = 0, 1, 0
        print(f"{path}: {passed} passed, {failed} failed, {skipped} skipped")
        total_passed += passed
        total_failed += failed
        total_skipped += skipped
    print(f"{total_passed} passed, {total_failed} failed, {total_skipped} skipped")
    return 1 if total_failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
