#!/usr/bin/env python3
"""Writes the first object of the first gpu.binary in an MLIR file (read from stdin) to a file.

The assembly of a `#gpu.object` is printed as an MLIR string with `\\XX` hex escapes; this
undoes them so that ptxas (or FileCheck) sees the PTX (or cubin) itself. Usage:
    hybridgen-opt ... | extract_gpu_object.py OUT
"""
import re
import sys


def main():
    text = sys.stdin.read()
    m = re.search(r'gpu\.binary\b.*?(?:assembly|bin|offload)\s*=\s*"((?:[^"\\]|\\.)*)"', text, re.S)
    if not m:
        sys.exit("extract_gpu_object: no gpu.binary object in the input")
    raw = m.group(1)
    out = bytearray()
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\":
            nxt = raw[i + 1]
            if nxt in '\\"':
                out.append(ord(nxt))
                i += 2
            elif nxt == "n":
                out.append(10)
                i += 2
            elif nxt == "t":
                out.append(9)
                i += 2
            else:
                out.append(int(raw[i + 1:i + 3], 16))
                i += 3
        else:
            out.extend(ch.encode("utf-8"))
            i += 1
    with open(sys.argv[1], "wb") as f:
        f.write(out)


if __name__ == "__main__":
    main()
