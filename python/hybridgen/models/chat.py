"""`python -m hybridgen chat`: a conversation in the terminal over hybridgen.Model.

Each turn renders the whole conversation through the chat template, keeps the KV cache of the
longest prefix of its tokens that the model already holds (Model.truncate drops the rest) and
prefills only what follows, so a long history or a long document at the start is prefilled once,
not every turn.

    session = ChatSession(model, TextCodec(model_dir), system="You are terse.")
    turn = session.reply("What is the capital of France?", on_text=print)
    turn.text, turn.tokens, turn.reused, turn.prefilled
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

import numpy as np

from .errors import ModelError
from .run import _prefill, _sampler, decode_tokens
from .text import TextCodec


@dataclass
class Turn:
    """One answer: its text and token ids, how many prompt tokens came from the cache (reused)
    and how many were prefilled, and the times of both phases."""
    text: str
    tokens: List[int] = field(default_factory=list)
    reused: int = 0
    prefilled: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0


def _common_prefix(a: List[int], b: List[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class ChatSession:
    """A conversation with a batch-1 hybridgen.Model; see the module docstring. |sampling|:
    Model.sampler()'s keywords (greedy when empty)."""

    def __init__(self, model, codec: TextCodec, *, system: Optional[str] = None,
                 sampling: Optional[dict] = None, max_new_tokens: int = 256, max_context: int = 0):
        if int(getattr(model, "batch", 1)) != 1:
            raise ModelError("chat: the model must have batch 1")
        self.model, self.codec, self.system = model, codec, system
        self.sampling = dict(sampling or {})
        self.max_new_tokens = int(max_new_tokens)
        self.max_context = int(max_context)
        self.reset()

    def reset(self) -> None:
        """Forgets the conversation and the model's KV cache."""
        self.messages = [{"role": "system", "content": self.system}] if self.system else []
        self.cached: List[int] = []  # the tokens whose KV the model holds, in order
        self.model.reset()

    def reply(self, text: str, on_text: Optional[Callable[[str], None]] = None,
              err=None) -> Turn:
        """The assistant's answer to user message |text|, streamed to |on_text|."""
        messages = self.messages + [{"role": "user", "content": text}]
        ids = self.codec.encode(self.codec.render_messages(messages))
        if self.max_context and len(ids) + self.max_new_tokens > self.max_context:
            raise ModelError(f"chat: the conversation is {len(ids)} tokens; with "
                             f"--max-new-tokens {self.max_new_tokens} it would pass the KV "
                             f"capacity of {self.max_context} tokens (--max-context); /reset "
                             f"starts over")
        # At least the last token is prefilled again: its logits start the answer.
        keep = min(_common_prefix(self.cached, ids), len(ids) - 1)
        self.model.truncate(keep)
        self.cached = self.cached[:keep]
        try:
            t0 = time.perf_counter()
            logits = _prefill(self.model, np.asarray([ids[keep:]], dtype=np.int32), "prefill",
                              err or sys.stderr)
            prefill_s = time.perf_counter() - t0
            stream = self.codec.stream()
            pieces: List[str] = []

            def emit(token):
                piece = stream.push(token)
                pieces.append(piece)
                if on_text is not None and piece:
                    on_text(piece)

            t0 = time.perf_counter()
            outs, _ = decode_tokens(self.model, logits, self.max_new_tokens,
                                    self.codec.eos_token_ids, on_token=emit,
                                    sampler=_sampler(self.model, self.sampling, ids))
            decode_s = time.perf_counter() - t0
        except BaseException:
            # The cache may hold part of this turn: start the next one from an empty cache (the
            # conversation so far is kept and prefilled again).
            self.cached = []
            self.model.reset()
            raise
        tokens = outs[0]
        # The last token was picked but never decoded: the cache holds the others.
        self.cached = list(ids) + tokens[:-1]
        rest = stream.flush()
        if on_text is not None and rest:
            on_text(rest)
        answer = self.codec.decode(tokens)
        self.messages = messages + [{"role": "assistant", "content": answer}]
        return Turn("".join(pieces) + rest, tokens, keep, len(ids) - keep, prefill_s, decode_s)


HELP = "/file PATH sends a file's text as your message, /reset starts over, /exit (or Ctrl-D) quits"


def run_chat(args, inp=None, out=None, err=None) -> int:
    """The REPL of `python -m hybridgen chat`: one user message per line."""
    from .run import _model_class, sampling_options

    inp, out, err = inp or sys.stdin, out or sys.stdout, err or sys.stderr
    codec = TextCodec(args.tokenizer or args.model)
    if not codec.chat_template:
        raise ModelError(f"{codec.dir}: tokenizer_config.json has no chat_template; chat needs one")
    max_context = args.max_context or 4096
    extra = {k: v for k, v in (("weight_dtype", args.weight_dtype), ("gpu_tokens", args.gpu_tokens))
             if v is not None}
    model = _model_class()(args.model, kv_dtype=args.kv_dtype, threads=args.threads,
                           policy=args.policy, batch=1, max_context=max_context, **extra)
    sampling = sampling_options(args)
    if sampling:
        model.sampler(**sampling)  # bad options fail here, before the first question
    session = ChatSession(model, codec, system=args.system, sampling=sampling,
                          max_new_tokens=args.max_new_tokens, max_context=max_context)
    interactive = hasattr(inp, "isatty") and inp.isatty()
    print(f"chat with {args.model} ({HELP})", file=err)
    while True:
        if interactive:
            out.write("> ")
            out.flush()
        line = inp.readline()
        if not line:
            break
        line = line.strip()
        if not line:
            continue
        if line in ("/exit", "/quit"):
            break
        if line == "/reset":
            session.reset()
            print("[conversation reset]", file=err)
            continue
        if line.startswith("/file "):
            from .run import read_prompt_file

            try:
                line = read_prompt_file(line[len("/file "):].strip())
            except ModelError as e:
                print(f"error: {e}", file=err)
                continue
        elif line.startswith("/"):
            print(f"unknown command {line.split()[0]} ({HELP})", file=err)
            continue
        try:
            turn = session.reply(line, on_text=lambda piece: (out.write(piece), out.flush()),
                                 err=err)
        except ModelError as e:
            print(f"error: {e}", file=err)
            continue
        out.write("\n")
        out.flush()
        rate = len(turn.tokens) / turn.decode_seconds if turn.decode_seconds > 0 else 0.0
        print(f"[{turn.reused} tokens reused from the cache, {turn.prefilled} prefilled in "
              f"{turn.prefill_seconds:.3f} s; {len(turn.tokens)} generated, {rate:.1f} tokens/s]",
              file=err)
    return 0
