# Runs the ```python examples of docs/python.md, in order and in one namespace, as a reader would.
import pathlib
import re

import pytest

import hybridgen as hg

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"


def python_blocks(text):
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_doc_has_examples():
    assert len(python_blocks(DOC.read_text())) >= 5


@pytest.mark.skipif(not hg.has_jit, reason="built without the compiler driver (JIT)")
def test_doc_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    for i, block in enumerate(python_blocks(DOC.read_text())):
        code = compile(block, f"{DOC.name}[block {i}]", "exec")
        exec(code, namespace)  # noqa: S102 - executing our own documentation is the point
