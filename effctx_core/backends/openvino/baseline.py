"""What the benchmark holds the engine against on OpenVINO.

- raw: the plain loop over the profile's own pipeline: on the stateful IR, infer in
  n_batch chunks, then argmax and one infer per token; on the paged pipeline, one request
  on openvino-genai's ContinuousBatchingPipeline, stepped until it is done;
- library: what a user would run instead of effctx, openvino-genai's `LLMPipeline.generate`
  on the same IR with token ids in and a streamer counting them out, same threads and
  cache element types (the pipeline's default PagedAttention backend, prefix caching
  off, so every run prefills the whole prompt);
- control: the same pipeline turn after turn of a conversation with its prefix cache on
  (off where the profile evicts: openvino-genai refuses the two together), so each call
  reuses what the pipeline's own cache still holds.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import openvino as ov
import openvino_genai as genai

from effctx_core.backends.gguf.runtime import LoadedModel, load_model
from effctx_core.backends.openvino.paged import scheduler_config
from effctx_core.backends.openvino.runtime import (
    DEVICE,
    compiled_model,
    infer_inputs,
    plugin_config,
    ready_ir,
)
from effctx_core.backends.openvino.settings import options_of
from effctx_core.contract import BaselineRun
from effctx_core.units import ms_between

if TYPE_CHECKING:
    from effctx_core.profiles import Profile


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


class _Conversation(_Counter):
    """Stops where a user's program would: at an end-of-generation token (any of them;
    the pipeline's own eos is one id) or once the text holds a stop string."""

    def __init__(self, vocab: LoadedModel, stop: tuple[str, ...]) -> None:
        super().__init__()
        self._vocab = vocab
        self._stop = stop

    def write(self, token: int | Sequence[int]) -> genai.StreamingStatus:
        super().write(token)
        if self._vocab.is_eog(self.tokens[-1]):
            self.tokens.pop()
            return genai.StreamingStatus.STOP
        if self._stop and any(s in self._vocab.detokenize(self.tokens) for s in self._stop):
            return genai.StreamingStatus.STOP
        return genai.StreamingStatus.RUNNING


class OpenVINOBaseline:
    name = "InferRequest loop (OpenVINO API, stateful IR)"
    library_name = "LLMPipeline.generate (openvino-genai)"

    def __init__(self, model_path: Path, profile: Profile):
        self._profile = profile
        self._model_path = model_path  # the GGUF: its vocabulary reads the control's stop strings
        self._ir = ir = ready_ir(model_path, profile)
        options = options_of(profile)
        self._config = plugin_config(profile, options)
        # The raw loop runs the profile's own pipeline: the stateful IR, or the paged one,
        # so engine/raw measures effctx and not one pipeline against the other.
        self._paged = options.pipeline == "paged"
        if self._paged:
            self.name = "ContinuousBatchingPipeline step loop (openvino-genai)"
        else:
            self._request = compiled_model(ir.xml, self._config).create_infer_request()
        self._pipeline: genai.LLMPipeline | None = None
        self._conversation: genai.LLMPipeline | None = None
        self._vocab: LoadedModel | None = None

    def _infer(self, tokens: Sequence[int], past: int) -> np.ndarray:
        n_batch = self._profile.n_batch
        for off in range(0, len(tokens), n_batch):
            self._request.infer(infer_inputs(tokens[off : off + n_batch], past + off))
        return self._request.get_tensor("logits").data[0, -1]

    def raw(self, prompt: Sequence[int], decode_tokens: int) -> BaselineRun:
        if self._paged:
            return self._paged_raw(prompt, decode_tokens)
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
        return BaselineRun(len(prompt), ms_between(t0, t1), len(out), ms_between(t1, t2), tuple(out))

    def _paged_raw(self, prompt: Sequence[int], decode_tokens: int) -> BaselineRun:
        """One request on a new ContinuousBatchingPipeline of the profile, stepped until
        it is done: what the paged cell runs, without effctx around it. New for each run,
        as each engine run opens its own: its cache starts empty and its first request
        pays the pipeline's first-request set-up, on both sides alike."""
        pipeline = genai.ContinuousBatchingPipeline(str(self._ir.path), scheduler_config(self._profile, options_of(
            self._profile)), DEVICE, self._config)
        config = genai.GenerationConfig()
        config.max_new_tokens = decode_tokens
        config.ignore_eos = True
        t0 = time.perf_counter_ns()
        handle = pipeline.add_request(0, ov.Tensor(np.asarray([prompt], dtype=np.int64)), config)
        out: list[int] = []
        t_first = None
        while pipeline.has_non_finished_requests() or handle.can_read():
            if handle.can_read():
                for output in handle.read().values():
                    out += [int(t) for t in output.generated_ids]
                if t_first is None and out:
                    t_first = time.perf_counter_ns()
                continue
            pipeline.step()
        t_end = time.perf_counter_ns()
        first = t_first or t_end
        return BaselineRun(len(prompt), ms_between(t0, first), len(out), ms_between(first, t_end), tuple(out))

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
        return BaselineRun(len(prompt), ms_between(t0, first), len(counter.tokens), ms_between(first, t_end), tuple(counter.tokens))

    def control(self, prompt: Sequence[int], decode_tokens: int, stop: tuple[str, ...]) -> BaselineRun:
        if self._conversation is None:
            options = options_of(self._profile)
            scheduler = scheduler_config(self._profile, options)
            scheduler.enable_prefix_caching = not options.evicts
            self._conversation = genai.LLMPipeline(str(self._ir.path), DEVICE, scheduler_config=scheduler,
                                                   **self._config)
        if self._vocab is None:
            self._vocab = load_model(self._model_path, vocab_only=True)
        config = genai.GenerationConfig()
        config.max_new_tokens = decode_tokens
        config.ignore_eos = True  # the streamer stops at every end-of-generation token
        streamer = _Conversation(self._vocab, stop)
        t0 = time.perf_counter_ns()
        self._conversation.generate(ov.Tensor(np.asarray([prompt], dtype=np.int64)), config, streamer)
        t_end = time.perf_counter_ns()
        first = streamer.first_ns or t_end
        return BaselineRun(len(prompt), ms_between(t0, first), len(streamer.tokens), ms_between(first, t_end),
                           tuple(streamer.tokens))

    def forget(self) -> None:
        self._conversation = None  # its cache goes with it

    def close(self) -> None:
        self._pipeline = None
        self._conversation = None
