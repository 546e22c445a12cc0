#!/usr/bin/env python3
"""Writes the IR fuzzer's seed corpus: every `// -----` case of every lit .mlir file under the
given test directory, with the lit/FileCheck comment lines removed, one file per case.

    extract_fuzz_seeds.py TEST_DIR OUT_DIR
"""
import hashlib
import pathlib
import sys


def cases(path):
    text = path.read_text(errors="replace")
    for chunk in text.split("// -----"):
        lines = [line for line in chunk.splitlines() if not line.lstrip().startswith("//")]
        body = "\n".join(lines).strip()
        if body:
            yield body + "\n"


def main(test_dir, out_dir):
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("seed-*.mlir"):
        old.unlink()
    count = 0
    for path in sorted(pathlib.Path(test_dir).rglob("*.mlir")):
        for body in cases(path):
            digest = hashlib.sha1(body.encode()).hexdigest()[:12]
            (out / f"seed-{path.stem}-{digest}.mlir").write_text(body)
            count += 1
    print(f"{count} seeds from {test_dir} in {out_dir}")
    return 0 if count else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
