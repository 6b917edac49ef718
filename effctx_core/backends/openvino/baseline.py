"""What the benchmark holds the engine against on OpenVINO.

- raw: the plain loop over OpenVINO's own API on the same compiled IR: infer in n_batch
  chunks, then argmax and one infer per token;
- library: what a user would run instead of effctx, openvino-genai's `LLMPipeline.generate`
  on the same IR with token ids in and a streamer counting them out, same threads and
  cache element types (the pipeline's default PagedAttention backend, prefix caching
  off, so every run prefills the whole prompt).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import openvino as ov
import openvino_genai as genai

from effctx_core.backends.openvino.runtime import (
    DEVICE,
    compiled_model,
    infer_inputs,
    plugin_config,
    ready_ir,
)
from effctx_core.backends.openvino.settings import options_of
from effctx_core.contract import BaselineRun

if TYPE_CHECKING:
    from effctx_core.profiles import Profile


def _ms(t0: int, t1: int) -> float:
    return (t1 - t0) / 1e6


class _Counter(genai.StreamerBase):
    """Records when each token arrives: the first one ends the prefill."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens: list[int] = []
        self.first_ns: int | None = None

    def write(self, token: int | Sequence[int]) -> genai.StreamingStatus:
        if self.first_ns is None:
            self.first_ns = time.perf_counter_ns()
        self.tokens += [int(token)] if isinstance(token, int) else [int(t) for t in token]
        return genai.StreamingStatus.RUNNING

    def end(self) -> None:
        pass


class OpenVINOBaseline:
    name = "InferRequest loop (OpenVINO API, stateful IR)"
    library_name = "LLMPipeline.generate (openvino-genai)"

    def __init__(self, model_path: Path, profile: Profile):
        self._profile = profile
        self._ir = ir = ready_ir(model_path, profile)
        self._config = plugin_config(profile, options_of(profile))
        self._request = compiled_model(ir.xml, self._config).create_infer_request()
        self._pipeline: genai.LLMPipeline | None = None

    def _infer(self, tokens: Sequence[int], past: int) -> np.ndarray:
        n_batch = self._profile.n_batch
        for off in range(0, len(tokens), n_batch):
            self._request.infer(infer_inputs(tokens[off : off + n_batch], past + off))
        return self._request.get_tensor("logits").data[0, -1]

    def raw(self, prompt: Sequence[int], decode_tokens: int) -> BaselineRun:
        self._request.reset_state()
        t0 = time.perf_counter_ns()
        logits = self._infer(prompt, 0)
        t1 = time.perf_counter_ns()
        out = []
        for i in range(decode_tokens):
            token = int(np.argmax(logits))
            out.append(token)
            logits = self._infer([token], len(prompt) + i)
        t2 = time.perf_counter_ns()
        return BaselineRun(len(prompt), _ms(t0, t1), len(out), _ms(t1, t2), tuple(out))

    def library(self, prompt: Sequence[int], decode_tokens: int) -> BaselineRun:
        if self._pipeline is None:
            scheduler = genai.SchedulerConfig()
            scheduler.enable_prefix_caching = False  # the pipeline would serve the repeated prompt from its cache
            scheduler.num_kv_blocks = -(-(len(prompt) + decode_tokens) // 32) + 2
            scheduler.cache_size = 0
            self._pipeline = genai.LLMPipeline(str(self._ir.path), DEVICE, scheduler_config=scheduler, **self._config)
        config = genai.GenerationConfig()
        config.max_new_tokens = decode_tokens
        config.ignore_eos = True
        counter = _Counter()
        t0 = time.perf_counter_ns()
        self._pipeline.generate(ov.Tensor(np.asarray([prompt], dtype=np.int64)), config, counter)
        t_end = time.perf_counter_ns()
        first = counter.first_ns or t_end
        return BaselineRun(len(prompt), _ms(t0, first), len(counter.tokens), _ms(first, t_end), tuple(counter.tokens))

    def close(self) -> None:
        self._pipeline = None
