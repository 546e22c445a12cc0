"""Text in and out of a model directory: its tokenizer.json, chat template and streaming decode.

    codec = TextCodec("build/models/smollm2")
    ids = codec.encode_chat("What is the capital of France?")    # ChatML, generation prompt added
    stream = codec.stream()
    for t in new_tokens: print(stream.push(t), end="")
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Optional

from .errors import ModelError


class TextCodec:
    """The tokenizer (HF tokenizers) and chat template (jinja2, as transformers renders it) of a
    model directory."""

    def __init__(self, model_dir):
        from tokenizers import Tokenizer

        self.dir = Path(model_dir)
        tk = self.dir / "tokenizer.json"
        if not tk.is_file():
            raise ModelError(f"{self.dir}: no tokenizer.json (text needs one; token ids do not)")
        try:
            self.tokenizer = Tokenizer.from_file(str(tk))
        except Exception as e:  # tokenizers raises a bare Exception on a malformed file
            raise ModelError(f"{tk}: cannot load the tokenizer: {e}") from e
        cfg_path = self.dir / "tokenizer_config.json"
        self.config = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
        model_cfg = self.dir / "config.json"
        self.model_config = json.loads(model_cfg.read_text()) if model_cfg.is_file() else {}

    @property
    def chat_template(self) -> Optional[str]:
        return self.config.get("chat_template")

    def _token(self, key) -> Optional[str]:
        t = self.config.get(key)
        return t.get("content") if isinstance(t, dict) else t

    @property
    def eos_token_ids(self) -> set:
        """Ids that end generation: the eos token, generation_config's eos ids, and <|im_end|> when
        the chat template uses ChatML (it closes every assistant turn)."""
        ids = set()
        eos = self._token("eos_token")
        if eos is not None and self.tokenizer.token_to_id(eos) is not None:
            ids.add(self.tokenizer.token_to_id(eos))
        gen = self.dir / "generation_config.json"
        for source in (self.model_config, json.loads(gen.read_text()) if gen.is_file() else {}):
            e = source.get("eos_token_id")
            ids.update(e if isinstance(e, list) else [] if e is None else [e])
        if self.chat_template and "<|im_end|>" in self.chat_template:
            end = self.tokenizer.token_to_id("<|im_end|>")
            if end is not None:
                ids.add(end)
        return ids

    def render_chat(self, prompt: str, system: Optional[str] = None) -> str:
        """The chat template applied to one user turn (plus |system|), ending with the assistant's
        generation prompt."""
        messages = ([{"role": "system", "content": system}] if system else []) + \
            [{"role": "user", "content": prompt}]
        return self.render_messages(messages)

    def render_messages(self, messages: list, add_generation_prompt: bool = True) -> str:
        """The chat template applied to a conversation (dicts with "role" and "content"), ending
        with the assistant's generation prompt unless |add_generation_prompt| is False."""
        if not self.chat_template:
            raise ModelError(f"{self.dir}: tokenizer_config.json has no chat_template (run without "
                             "--chat)")
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise ModelError(f"chat template: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        try:
            return env.from_string(self.chat_template).render(
                messages=list(messages), add_generation_prompt=add_generation_prompt,
                bos_token=self._token("bos_token") or "", eos_token=self._token("eos_token") or "")
        except TemplateError as e:
            raise ModelError(f"{self.dir}: chat template does not render: {e}") from e

    def encode(self, text: str) -> list:
        """Token ids of |text|; special tokens written in it (<|im_start|>) map to their ids."""
        return self.tokenizer.encode(text).ids

    def encode_chat(self, prompt: str, system: Optional[str] = None) -> list:
        return self.encode(self.render_chat(prompt, system))

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def stream(self) -> "StreamDecoder":
        return StreamDecoder(self)


class StreamDecoder:
    """Turns tokens into text as they come: each push returns only the new characters, holding
    back an incomplete UTF-8 sequence (byte-level BPE splits characters across tokens)."""

    def __init__(self, codec: TextCodec):
        self.codec, self.ids, self.text = codec, [], ""

    def push(self, token: int) -> str:
        self.ids.append(int(token))
        full = self.codec.decode(self.ids)
        if full.endswith("\ufffd"):
            return ""
        new, self.text = full[len(self.text):], full
        return new

    def flush(self) -> str:
        """What is still held back at the end (bytes that never completed a character)."""
        full = self.codec.decode(self.ids)
        new, self.text = full[len(self.text):], full
        return new
