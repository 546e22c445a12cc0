"""The exceptions of hybridgen.models: every one is a hybridgen.HybridgenError."""

from .._hybridgen import HybridgenError


class ModelError(HybridgenError):
    """A model config, checkpoint or GGUF file that hybridgen.models cannot use; the message says why."""


class UnsupportedModelError(ModelError):
    """A well-formed input that asks for an architecture, option or quant type not supported here."""


class GgufImportError(ModelError):
    """A GGUF file that cannot be imported: not GGUF, or missing the metadata the import needs."""
