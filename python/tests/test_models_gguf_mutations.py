# GGUF import on hostile files (issue 17: bad inputs of new code belong in the error tests): a few
# hundred seeded mutations of a valid tiny GGUF (truncations, byte flips in the header, metadata
# and tensor-info region, and anywhere, length fields set to huge values) must each either import
# or fail with the project's own errors (HybridgenError subclasses), never another exception.
# An import that succeeds must leave a checkpoint the loader accepts or refuses cleanly.
import struct

import numpy as np
import pytest

import hybridgen as hg
from hybridgen.models import load_checkpoint, random_weights, tiny_config
from hybridgen.models.gguf_import import import_gguf
from test_models_gguf import _vocab, write_llama_gguf

MUTATIONS = 240


@pytest.fixture(scope="module")
def valid_gguf(tmp_path_factory):
    tokens, _ = _vocab()
    cfg = tiny_config("llama", vocab_size=len(tokens))
    w = {k: v.astype(np.float32) for k, v in random_weights(cfg, seed=5).items()}
    return write_llama_gguf(tmp_path_factory.mktemp("gguf") / "valid.gguf", cfg, w).read_bytes()


def _mutate(data: bytes, rng: np.random.Generator) -> bytes:
    b = bytearray(data)
    kind = int(rng.integers(0, 4))
    if kind == 0:  # truncated anywhere
        return bytes(b[: int(rng.integers(0, len(b)))])
    # Most of the structure (counts, string and array lengths, tensor offsets) is in the first KB.
    region = len(b) if kind == 1 else min(len(b), 4096)
    if kind == 3:  # a 64-bit length or count field set to a huge value
        at = int(rng.integers(0, max(1, region - 8)))
        b[at:at + 8] = struct.pack("<Q", [2**63 - 1, 2**64 - 1, 2**32, 2**40][int(rng.integers(0, 4))])
        return bytes(b)
    for _ in range(int(rng.integers(1, 9))):
        b[int(rng.integers(0, region))] = int(rng.integers(0, 256))
    return bytes(b)


def test_mutated_gguf_files_fail_only_with_project_errors(tmp_path, valid_gguf):
    rng = np.random.default_rng(2026)
    outcomes = {"imported": 0, "refused": 0}
    for i in range(MUTATIONS):
        src = tmp_path / f"m{i}.gguf"
        src.write_bytes(_mutate(valid_gguf, rng))
        out = tmp_path / f"o{i}"
        try:
            import_gguf(src, out)
        except hg.HybridgenError:
            outcomes["refused"] += 1
            continue
        except Exception as e:  # noqa: BLE001 - the point of the test
            pytest.fail(f"mutation {i}: import raised {type(e).__name__}: {e}")
        outcomes["imported"] += 1
        try:  # whatever was accepted is a checkpoint the loader reads or refuses cleanly
            load_checkpoint(out)
        except hg.HybridgenError:
            pass
        except Exception as e:  # noqa: BLE001
            pytest.fail(f"mutation {i}: the imported checkpoint raised {type(e).__name__}: {e}")
    # Both outcomes occur: flips inside tensor data import (the values change, nothing else).
    assert outcomes["refused"] > MUTATIONS // 4 and outcomes["imported"] > 0, outcomes
