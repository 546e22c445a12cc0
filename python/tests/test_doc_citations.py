# Code comments, tests and docs cite the CPU path's documentation by section, as
# `docs/cpu-runs.md, "K transposed per block"`. Every such citation must name a heading (or a bold
# paragraph lead) of the file it names, so that moving or renaming a section cannot leave readers
# of the code pointing at nothing (the dated sections moved from cpu-path.md to cpu-runs.md on
# 2026-12-08).
import pathlib
import re

THIS = pathlib.Path(__file__).resolve()  # its own examples are not citations
ROOT = THIS.parents[2]
CITED = ("cpu-path.md", "cpu-runs.md")
# docs/cpu-runs.md, "Name" -- the name may run over a line break inside a comment.
CITATION = re.compile(
    "(" + "|".join(map(re.escape, CITED)) + r'),\s*(?:(?:///|//|#|\*)\s*)?"([^"]*)"')
SOURCES = ["lib", "include", "runtime", "python", "test", "bench/cpu_attention", "docs", "scripts",
           "tools"]
SUFFIXES = {".cpp", ".h", ".c", ".td", ".py", ".mlir", ".md", ".sh", ".txt"}


def anchors(text):
    """Headings and bold paragraph leads: what a citation may name."""
    heads = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
    return heads + re.findall(r"\*\*([^*]+)\*\*", text)


def citations():
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file() or path.resolve() == THIS:
                continue
            text = path.read_text(errors="replace")
            for m in CITATION.finditer(text):
                # A name broken over comment lines: join its pieces with single spaces.
                name = re.sub(r"\s*\n\s*(?:///|//|#|\*)?\s*", " ", m.group(2)).strip()
                yield path.relative_to(ROOT), m.group(1), name


def test_every_section_citation_names_a_section():
    known = {doc: anchors((ROOT / "docs" / doc).read_text()) for doc in CITED}
    found, missing = 0, []
    for path, doc, name in citations():
        found += 1
        if not any(a.startswith(name.rstrip(".")) for a in known[doc]):
            missing.append(f"{path}: {doc}, \"{name}\"")
    assert found >= 40, f"only {found} citations found: the pattern no longer matches them"
    assert not missing, "citations of sections that do not exist:\n" + "\n".join(missing)
