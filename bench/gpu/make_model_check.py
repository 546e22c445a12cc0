#!/usr/bin/env python3
"""Writes the device check's model case into DIR: checkpoint/ (a Llama-architecture model with
SmolLM2's attention shape, 9 q / 3 kv heads of 64, two layers, seeded random f32 weights) and
expected.txt (the prompt, the float64 reference's greedy tokens and the GPU side's KV budget).
build-device-artifacts.sh then compiles checkpoint/ into artifact/ with the GPU kernels.

    python make_model_check.py DIR"""
import sys
from pathlib import Path

import numpy as np

from hybridgen.models import Reference, greedy, random_weights, tiny_config, write_checkpoint

PROMPT_TOKENS, NEW_TOKENS, GPU_TOKENS = 40, 12, 24


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = Path(sys.argv[1])
    cfg = tiny_config("llama", hidden_size=576, intermediate_size=768, num_hidden_layers=2,
                      num_attention_heads=9, num_key_value_heads=3, head_dim=64, vocab_size=512)
    weights = {k: v.astype(np.float32) for k, v in random_weights(cfg, seed=15).items()}
    write_checkpoint(out / "checkpoint", cfg, weights)
    prompt = [int(t) for t in np.random.default_rng(15).integers(3, cfg["vocab_size"], PROMPT_TOKENS)]
    tokens = greedy(Reference(cfg, weights), prompt, NEW_TOKENS)
    # The prompt and the first tokens fill more than the budget, so every layer is split.
    (out / "expected.txt").write_text(f"prompt {','.join(map(str, prompt))}\n"
                                      f"tokens {','.join(map(str, tokens))}\n"
                                      f"gpu_tokens {GPU_TOKENS}\n")


if __name__ == "__main__":
    main()
