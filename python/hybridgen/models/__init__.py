"""hybridgen.models: float64 reference forwards, test checkpoints, GGUF import and the text front end.

Pure Python (numpy, safetensors, gguf, tokenizers); independent of the compiler and the runtime."""

from .errors import GgufImportError, ModelError, UnsupportedModelError
from .reference import ARCHITECTURES, KVCache, Reference, apply_rope, architecture, forward, greedy, \
    rope_inv_freq
from .checkpoint import (TINY_ARCHS, drop_tensor, lie_about_offsets, load_checkpoint, random_weights,
                         tiny_config, truncate_file, weight_shapes, write_checkpoint,
                         write_random_checkpoint, wrong_shape)
from .run import decode_tokens, generate_text, greedy_decode
from .chat import ChatSession, Turn
from .text import TextCodec

__all__ = [
    "GgufImportError", "ModelError", "UnsupportedModelError",
    "ARCHITECTURES", "KVCache", "Reference", "apply_rope", "architecture", "forward", "greedy",
    "rope_inv_freq",
    "TINY_ARCHS", "drop_tensor", "lie_about_offsets", "load_checkpoint", "random_weights",
    "tiny_config", "truncate_file", "weight_shapes", "write_checkpoint", "write_random_checkpoint",
    "wrong_shape", "decode_tokens", "generate_text", "greedy_decode", "TextCodec", "ChatSession",
    "Turn",
]
