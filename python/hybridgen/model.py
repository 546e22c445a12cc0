"""hybridgen.Model: a compiled decoder LLM (Hugging Face model dir or hybridgen-compile artifact).

    m = hybridgen.Model("path/to/model_dir")           # compiled on first use, then cached
    logits = m.prefill(np.array([[1, 2, 3]], np.int32)) # [batch, vocab]
    tokens = m.generate(ids, 16, on_token=print)       # greedy, list per sequence
    tokens = m.generate(ids, 16, temperature=0.8, top_p=0.95, seed=1)  # sampled, reproducible
    for step in m.stream(ids, 16): ...                  # each step's tokens as they come
    m.generate_text("What is the capital of France?", on_text=print)   # text in, text out
    m.stats()                                          # tokens/s, split per layer, tiers, migrations

The native ModelRunner (runtime, no MLIR) does the work: it maps the weights, owns the KV pool and
the split scheduler; this class only shapes arguments and loops for generate(). An artifact dir runs
with the runtime extension alone (no LLVM/MLIR needed); a model dir is compiled first, which needs
the compiler extension.
"""

from __future__ import annotations

import json
import os
from typing import Callable, Iterable, Iterator, List, Optional, Sequence

import numpy as np

from . import _hybridgen as _native
from ._errors import check_int
from ._hybridgen import ArgumentError


def _is_artifact(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "metadata.json"))


def compile_model(model_dir: str, artifact_dir: str = "", *, weight_dtype: str = "auto",
                  kv_dtypes: Sequence[str] = ("f32", "bf16"), prefill: bool = True,
                  force: bool = False, bf16_dot_rounded: bool = False,
                  k_transposed: bool = True) -> str:
    """Compiles |model_dir| (config.json + safetensors) into an artifact dir and returns its path;
    an up-to-date artifact is reused unless |force|. |weight_dtype| "auto" compiles for the
    checkpoint's own element type (bf16 weights stay bf16: the same values, half the bytes).
    |bf16_dot_rounded|: the bf16 KV attention's logits and p.V take q and p rounded once to bf16
    in AVX512-BF16 dot products where the CPU has them (faster; relative error ~2e-3, as a bf16
    model's attention; docs/models.md).
    |k_transposed|: the runner's KV pool stores K pieces transposed, as the kernels then read
    them (exact arithmetic, faster decode attention on the CPU; docs/models.md)."""
    try:
        from . import _hybridgen_jit
    except ImportError as e:
        raise ArgumentError(f"compiling {os.fspath(model_dir)} needs hybridgen's compiler (the "
                            f"_hybridgen_jit extension, LLVM/MLIR), which is not available here "
                            f"({e}); compile it with hybridgen-compile where it is and pass the "
                            f"artifact dir") from None
    return _hybridgen_jit.compile_model(os.fspath(model_dir), os.fspath(artifact_dir), weight_dtype,
                                        list(kv_dtypes), prefill, force, bool(bf16_dot_rounded),
                                        bool(k_transposed))


class Model:
    """A decoder model run by the hybridgen runtime; see the module docstring.

    |gpu_tokens| is the GPU side's KV budget per sequence and layer: the scheduler then keeps at
    least the rest of the tokens on the CPU side (0: unlimited). With an artifact compiled with
    GPU kernels (hybridgen-compile --gpu) and a usable CUDA device, a budget > 0 puts those tokens'
    KV in device memory and the kernels run there (stats()["gpu_side"] names the device);
    otherwise the GPU partial runs on the CPU and its time is modelled ("modelled"). |map_weights| runs on the
    checkpoint file's mapping instead of copying the weights into huge-page memory at load: less
    memory and a faster start, but decode reads the page cache's scattered pages more slowly
    (docs/models.md, "Weight memory"). |bf16_dot_rounded| compiles a model dir with the bf16 KV
    attention's dot products on values rounded once to bf16, |k_transposed| with K stored
    row-major when False (see compile_model)."""

    def __init__(self, path, *, kv_dtype: Optional[str] = None, threads: Optional[int] = None,
                 policy: str = "feedback", batch: int = 1, max_context: int = 4096,
                 weight_dtype: str = "auto", artifact_dir: str = "", weights: str = "",
                 prefill_chunk: int = 512, gpu_tokens: int = 0, map_weights: bool = False,
                 bf16_dot_rounded: bool = False, k_transposed: bool = True, tokenizer: str = ""):
        path = os.fspath(path)
        if not os.path.isdir(path):
            raise ArgumentError(f"Model: {path} is not a directory (a model dir or an artifact)")
        if _is_artifact(path):
            self.artifact = path
        elif os.path.isfile(os.path.join(path, "config.json")):
            kvs = ["f32", "bf16"]
            if kv_dtype and kv_dtype not in kvs:
                kvs.append(kv_dtype)
            self.artifact = compile_model(path, artifact_dir, weight_dtype=weight_dtype,
                                          kv_dtypes=kvs, bf16_dot_rounded=bf16_dot_rounded,
                                          k_transposed=k_transposed)
            weights = weights or path
        else:
            raise ArgumentError(f"Model: {path} has neither metadata.json (an artifact) nor "
                                f"config.json (a Hugging Face model dir)")
        self._runner = _native.ModelRunner(self.artifact, policy=policy, batch=int(batch),
                                           max_context=int(max_context), kv_dtype=kv_dtype or "",
                                           threads=int(threads or 0), weights=weights,
                                           prefill_chunk=int(prefill_chunk),
                                           gpu_tokens=int(gpu_tokens),
                                           map_weights=bool(map_weights))
        self.config = json.loads(self._runner.config_json)
        if tokenizer:
            self._tokenizer_dir = os.fspath(tokenizer)
        elif weights:  # a checkpoint dir, or a .safetensors file in one
            weights = os.fspath(weights)
            self._tokenizer_dir = weights if os.path.isdir(weights) else os.path.dirname(weights)
        elif self.artifact == path:  # an artifact: the checkpoint dir it was compiled from
            with open(os.path.join(path, "metadata.json")) as f:
                self._tokenizer_dir = json.load(f).get("weights", path)
        else:
            self._tokenizer_dir = path
        self._codec = None
        self.batch = int(batch)
        self.kv_dtype = self._runner.kv_dtype
        self.policy = policy

    def reset(self) -> None:
        """Drops every sequence's KV cache (and the statistics)."""
        self._runner.reset()

    def truncate(self, length: int) -> None:
        """Keeps the first |length| tokens of every sequence's KV cache and drops the rest: a
        shared prefix (a chat's history, a long document asked several questions) is then reused,
        not prefilled again. ArgumentError, nothing changed, when a sequence is shorter."""
        self._runner.truncate(int(length))

    def _ids(self, ids, ndim: int, what: str) -> np.ndarray:
        arr = np.ascontiguousarray(np.asarray(ids), dtype=np.int32) if np.asarray(ids).dtype.kind \
            in "iu" else None
        if arr is None or arr.ndim != ndim or arr.shape[0] != self.batch:
            want = "[batch, T]" if ndim == 2 else "[batch]"
            raise ArgumentError(f"{what}: ids must be integers of shape {want} with batch "
                                f"{self.batch}, got {np.asarray(ids).dtype} "
                                f"{list(np.asarray(ids).shape)}")
        return arr

    def prefill(self, ids, all_logits: bool = False) -> np.ndarray:
        """Appends ids [batch, T] to every sequence; float32 logits [batch, vocab] of the last
        token, or [batch, T, vocab] with |all_logits|."""
        return self._runner.prefill(self._ids(ids, 2, "prefill"), bool(all_logits))

    def decode(self, ids) -> np.ndarray:
        """One new token per sequence (ids [batch]); float32 logits [batch, vocab]."""
        return self._runner.decode(self._ids(ids, 1, "decode"))

    def sampler(self, *, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                min_p: float = 0.0, repetition_penalty: float = 1.0, seed: int = 0):
        """The runtime's token sampler for this model's batch and vocabulary (hybridgen-run's
        code): `next(logits [batch, vocab])` gives one token per sequence and remembers it for the
        repetition penalty; `observe(seq, ids)` adds a prompt. temperature 0 is greedy (the first
        largest logit); otherwise a draw from softmax(logits / temperature) after top-k, top-p
        (nucleus) and min-p, in that order, from sequence b's own stream seeded by (seed, b).
        repetition_penalty is Hugging Face's (a seen token's logit divided by it when positive,
        multiplied when negative). Bad values raise ArgumentError naming the option."""
        def real(v, name):  # the sampler checks the ranges (NaN included) and names the option
            try:
                return float(v)
            except (TypeError, ValueError):
                raise ArgumentError(f"sampling: {name} must be a number, got {v!r}") from None

        return _native.Sampler(self.batch, int(self.config["vocab_size"]),
                               temperature=real(temperature, "temperature"),
                               top_k=check_int(top_k, "sampling: top_k", 0, 2**63 - 1),
                               top_p=real(top_p, "top_p"), min_p=real(min_p, "min_p"),
                               repetition_penalty=real(repetition_penalty, "repetition_penalty"),
                               seed=check_int(seed, "sampling: seed", 0, 2**64 - 1))

    def stream(self, ids, max_new_tokens: int, *, temperature: float = 0.0, top_k: int = 0,
               top_p: float = 1.0, min_p: float = 0.0, repetition_penalty: float = 1.0,
               seed: int = 0, eos_token_ids: Iterable[int] = ()) -> Iterator[List[int]]:
        """Prefills |ids| ([batch, T], or [T] for batch 1), then yields each step's new tokens,
        one per sequence, up to |max_new_tokens| steps: greedy by default, sampled with
        temperature > 0 (see sampler(); the prompt counts for the repetition penalty). A sequence
        that produces one of |eos_token_ids| ends there (that id is yielded) and is -1 in later
        steps; the stream ends when all have ended."""
        arr = np.asarray(ids)
        if arr.ndim == 1 and self.batch == 1:
            arr = arr[None, :]
        if int(max_new_tokens) < 0:
            raise ArgumentError("generate: max_new_tokens must be >= 0")
        pick = self.sampler(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                            repetition_penalty=repetition_penalty, seed=seed)
        prompt = self._ids(arr, 2, "generate")
        return self._stream(prompt, int(max_new_tokens), pick, {int(t) for t in eos_token_ids})

    def _stream(self, prompt: np.ndarray, max_new_tokens: int, pick, eos: set):
        if max_new_tokens == 0:
            return
        for b in range(self.batch):
            pick.observe(b, prompt[b])
        yield from self.steps(self.prefill(prompt), max_new_tokens, pick, eos)

    def steps(self, logits, max_new_tokens: int, sampler=None, eos_token_ids: Iterable[int] = ()):
        """From |logits| [batch, vocab] of each sequence's last token (a prefill's or a decode's),
        up to |max_new_tokens| steps of new tokens, one per sequence, as stream() yields them:
        each picked by |sampler| (greedy when None), fed back through decode() before the next
        step, -1 once that sequence produced one of |eos_token_ids|."""
        pick = sampler if sampler is not None else self.sampler()
        eos = {int(t) for t in eos_token_ids}
        done = [False] * self.batch
        for step in range(int(max_new_tokens)):
            if step:
                logits = self.decode(np.asarray(nxt, dtype=np.int32))
            nxt = pick.next(np.ascontiguousarray(logits, dtype=np.float32))
            yield [-1 if done[b] else t for b, t in enumerate(nxt)]
            done = [d or t in eos for d, t in zip(done, nxt)]
            if all(done):
                return

    def generate(self, ids, max_new_tokens: int, *,
                 on_token: Optional[Callable[[List[int]], None]] = None,
                 **options) -> List[List[int]]:
        """stream()'s tokens (same arguments and options) as one list per sequence, each ending at
        its end token if it met one; |on_token| gets each step's tokens as they come."""
        out: List[List[int]] = [[] for _ in range(self.batch)]
        for step in self.stream(ids, max_new_tokens, **options):
            for b, t in enumerate(step):
                if t >= 0:
                    out[b].append(t)
            if on_token is not None:
                on_token(step)
        return out

    def text_codec(self):
        """The model's tokenizer and chat template (hybridgen.models.TextCodec): from |tokenizer|
        given at construction, else the model dir, else the checkpoint dir an artifact names."""
        if self._codec is None:
            from .models.text import TextCodec

            self._codec = TextCodec(self._tokenizer_dir)
        return self._codec

    def generate_text(self, prompt: str, max_new_tokens: int = 64, *, chat: bool = True,
                      system: Optional[str] = None, on_text: Optional[Callable[[str], None]] = None,
                      **sampling) -> str:
        """The answer to text |prompt| (through the chat template unless |chat| is False), with
        the KV cache reset first, stopping at the tokenizer's end tokens; |on_text| gets the text
        as it comes; |sampling|: sampler()'s keywords (greedy when none)."""
        from .models.run import generate_text

        return generate_text(self, prompt, self.text_codec(), chat=chat, system=system,
                             max_new_tokens=max_new_tokens, on_text=on_text, sampling=sampling)

    def sequence_lengths(self) -> List[int]:
        return list(self._runner.sequence_lengths())

    def stats(self) -> dict:
        """prefill/decode tokens/s, split per layer, tier occupancy, migrations."""
        return dict(self._runner.stats())

    def trace_csv(self) -> str:
        """The scheduler's trace: one row per layer (segment) and decode step."""
        return self._runner.trace_csv()

    def weight_bytes_per_step(self) -> int:
        """Bytes of weights one decode step reads (every layer's, OPT's project_in, the final
        norm, project_out and head; of the embedding only the gathered rows, not counted)."""
        return int(self._runner.weight_bytes_per_step())
