"""What the benchmark holds the engine against on llama.cpp.

- raw: the plain loop over the C API: llama_decode in n_batch chunks, then greedy
  sampling one token at a time, on a context with the profile's exact parameters;
- library: what a user would run instead of effctx, llama-cpp-python's high-level
  `Llama.create_completion`, with the same context settings and thread count; each run
  starts from an empty cache, so every prompt token is prefilled;
- control: the same call turn after turn of a conversation, reusing what the library
  reuses by itself.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import numpy.typing as npt

from effctx_core.backends.gguf.binding import llama_cpp
from effctx_core.backends.gguf.context import KV_CACHE_TYPES
from effctx_core.backends.gguf.runtime import clear_llama_errors, llama_error_reason, load_model
from effctx_core.backends.llama.session import context_params
from effctx_core.backends.llama.settings import options_of
from effctx_core.contract import BaselineRun
from effctx_core.errors import EffctxError
from effctx_core.units import ms_between

if TYPE_CHECKING:
    # The profile is read, never built, here: the backends sit below the profile schema.
    from effctx_core.profiles import Profile


class LlamaBaseline:
    name = "llama_decode loop (llama-cpp-python C API)"
    library_name = "Llama.create_completion (llama-cpp-python)"

    def __init__(self, model_path: Path, profile: Profile, gpu_layers: int = 0):
        self._profile = profile
        self._gpu_layers = gpu_layers  # to the registered RPC workers, where the cell has them
        self._model = load_model(model_path, gpu_layers=gpu_layers)
        clear_llama_errors()
        self._ctx = llama_cpp.llama_init_from_model(self._model.model, context_params(profile))
        if not self._ctx:
            raise EffctxError(f"llama.cpp could not create the baseline's context: {llama_error_reason('no reason given')}")
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(profile.n_batch, 0, 1)
        self._sampler = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        llama_cpp.llama_sampler_chain_add(self._sampler, llama_cpp.llama_sampler_init_greedy())
        self._llama: llama_cpp.Llama | None = None

    # ------------------------------------------------------------------ raw

    def _decode(self, tokens: Sequence[int], pos0: int) -> None:
        batch, n_batch = self._batch, self._profile.n_batch
        for i in range(0, len(tokens), n_batch):
            chunk = tokens[i : i + n_batch]
            batch.n_tokens = len(chunk)
            for j, tok in enumerate(chunk):
                batch.token[j] = tok
                batch.pos[j] = pos0 + i + j
                batch.n_seq_id[j] = 1
                batch.seq_id[j][0] = 0
                batch.logits[j] = 0
            batch.logits[len(chunk) - 1] = 1
            if llama_cpp.llama_decode(self._ctx, batch) != 0:
                raise EffctxError("llama_decode failed in the raw benchmark loop")

    def raw(self, prompt: Sequence[int], decode_tokens: int) -> BaselineRun:
        llama_cpp.llama_memory_clear(self._mem, True)
        t0 = time.perf_counter_ns()
        self._decode(prompt, 0)
        t1 = time.perf_counter_ns()
        out = []
        pos = len(prompt)
        for _ in range(decode_tokens):
            token = llama_cpp.llama_sampler_sample(self._sampler, self._ctx, -1)
            out.append(token)
            self._decode([token], pos)
            pos += 1
        t2 = time.perf_counter_ns()
        return BaselineRun(len(prompt), ms_between(t0, t1), len(out), ms_between(t1, t2), tuple(out))

    # ------------------------------------------------------------------ library

    def _library(self) -> llama_cpp.Llama:
        if self._llama is None:
            p = self._profile
            self._llama = llama_cpp.Llama(
                model_path=str(self._model.path), n_gpu_layers=self._gpu_layers, n_ctx=p.n_ctx, n_batch=p.n_batch, n_ubatch=p.n_batch,
                n_threads=p.n_threads, n_threads_batch=p.n_threads, flash_attn=options_of(p).flash_attn, swa_full=options_of(p).swa_full,
                type_k=KV_CACHE_TYPES[p.kv_cache_type_k], type_v=KV_CACHE_TYPES[p.kv_cache_type_v], verbose=False,
            )
        return self._llama

    def library(self, prompt: Sequence[int], decode_tokens: int) -> BaselineRun:
        """Streamed, as an interactive user would: the prefill ends where the first token
        arrives; the decode runs from there to the last. Greedy (temperature 0)."""
        self.forget()  # otherwise it reuses the prompt it saw in the previous run
        return self._stream(prompt, decode_tokens, ())

    def control(self, prompt: Sequence[int], decode_tokens: int, stop: tuple[str, ...]) -> BaselineRun:
        # create_completion reuses the longest common prefix with the tokens it holds
        # from its previous call by itself (where llama.cpp can cut the cache there).
        return self._stream(prompt, decode_tokens, stop)

    def forget(self) -> None:
        if self._llama is not None:
            self._llama.reset()

    def _stream(self, prompt: Sequence[int], decode_tokens: int, stop: tuple[str, ...]) -> BaselineRun:
        llm = self._library()
        out: list[int] = []
        first: list[int] = []

        def record(_ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
            # Called once per sampled token with its logits, so the first call is where
            # the prefill ended; greedy takes their argmax.
            if not first:
                first.append(time.perf_counter_ns())
            out.append(int(np.argmax(logits)))
            return logits

        t0 = time.perf_counter_ns()
        stream = llm.create_completion(list(prompt), max_tokens=decode_tokens, temperature=0.0, stream=True,
                                       stop=list(stop), logits_processor=llama_cpp.LogitsProcessorList([record]))
        for _chunk in stream:
            pass
        t_end = time.perf_counter_ns()
        if out and self._model.is_eog(out[-1]):
            out.pop()  # the end-of-generation token ends the stream; it is not output
        t_first = first[0] if first else t_end
        return BaselineRun(len(prompt), ms_between(t0, t_first), len(out), ms_between(t_first, t_end), tuple(out))

    def close(self) -> None:
        if self._llama is not None:
            self._llama.close()
            self._llama = None
        if self._ctx:
            llama_cpp.llama_sampler_free(self._sampler)
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
