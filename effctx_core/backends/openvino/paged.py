"""An OpenVINO session on openvino-genai's ContinuousBatchingPipeline: PagedAttention over
32-token cache blocks, with the pipeline's own prefix caching, cache eviction and sparse
prefill.

The pipeline owns its cache: effctx submits the whole tape as one request and steps the
scheduler (one step = one prefill chunk of n_batch tokens, or one generated token). A
prefill is a request for one new token, which is dropped: what remains is the blocks the
prefix cache keeps for the next request. Nothing can be cut, shifted, saved or loaded,
and which blocks the pipeline keeps is not observable: residency here is modeled.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any, Generator, Sequence

import numpy as np
import openvino as ov
import openvino_genai as genai

from effctx_core.backends.cache_session import CacheSession, check_trained_context
from effctx_core.backends.gguf.runtime import LoadedModel
from effctx_core.backends.openvino.convert import ConvertedModel
from effctx_core.backends.openvino.info import model_info
from effctx_core.backends.openvino.runtime import DEVICE, first_line, plugin_config
from effctx_core.backends.openvino.settings import BLOCK_TOKENS, OpenVINOOptions, options_of
from effctx_core.contract import (
    DecodeConfig,
    PrefillProgress,
    ProgressSink,
    RuntimeCounts,
    SessionSnapshot,
    TokenChunk,
)
from effctx_core.errors import EffctxError, UnsupportedFeatureError
from effctx_core.units import ms_since

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

_AGGREGATION = {"sum": genai.AggregationMode.SUM, "norm_sum": genai.AggregationMode.NORM_SUM}
_SPARSE = {"trishape": genai.SparseAttentionMode.TRISHAPE, "xattention": genai.SparseAttentionMode.XATTENTION}
_RUNNING = genai.GenerationStatus.RUNNING


def scheduler_config(profile: Profile, options: OpenVINOOptions) -> genai.SchedulerConfig:
    config = genai.SchedulerConfig()
    if options.cache_size:
        config.cache_size = options.cache_size
    else:
        # One block more than n_ctx needs: the generated token's block.
        config.num_kv_blocks = options.num_kv_blocks or -(-profile.n_ctx // BLOCK_TOKENS) + 1
        config.cache_size = 0
    config.enable_prefix_caching = options.enable_prefix_caching
    # One scheduler step prefills at most n_batch tokens: the chunk progress is reported by.
    config.max_num_batched_tokens = profile.n_batch
    config.dynamic_split_fuse = True
    config.max_num_seqs = 1
    if options.evicts:
        config.use_cache_eviction = True
        config.cache_eviction_config = genai.CacheEvictionConfig(
            options.start_size, options.recent_size, options.max_cache_size, _AGGREGATION[options.aggregation_mode])
    if options.sparse_prefill != "none":
        config.use_sparse_attention = True
        sparse = genai.SparseAttentionConfig()
        sparse.mode = _SPARSE[options.sparse_prefill]
        config.sparse_attention_config = sparse
    return config


class OpenVINOPagedSession(CacheSession):
    def __init__(self, vocab: LoadedModel, ir: ConvertedModel, profile: Profile, backend_version: str):
        check_trained_context(profile.n_ctx, vocab.facts.context_length)
        super().__init__(vocab, profile.n_ctx)
        options = options_of(profile)
        self._n_batch = profile.n_batch
        self._prefix_caching = options.enable_prefix_caching
        self._ir_path = ir.path
        self._scheduler = scheduler_config(profile, options)
        self._plugin = plugin_config(profile, options)
        self._pipeline = self._open_pipeline()
        # Whether the pipeline's prefix cache may hold blocks of an earlier request.
        self._holds_blocks = False
        self._request_ids = itertools.count()
        self._last_request: RuntimeCounts | None = None
        self._info = model_info(vocab, profile, backend_version,
                                f"converted IR {ir.path} ({ir.manifest['weights']}), openvino-genai paged pipeline")
        self.identity = self._info.identity

    def _open_pipeline(self) -> genai.ContinuousBatchingPipeline:
        try:
            return genai.ContinuousBatchingPipeline(str(self._ir_path), self._scheduler, DEVICE, self._plugin)
        except RuntimeError as exc:
            raise EffctxError(f"openvino-genai could not open {self._ir_path}: {first_line(exc)}") from None

    def _generation_config(self, max_new_tokens: int, decode: DecodeConfig | None = None) -> genai.GenerationConfig:
        config = genai.GenerationConfig()
        config.max_new_tokens = max_new_tokens
        # effctx stops at the vocabulary's end-of-generation tokens itself (and cancels the
        # request), so every token the pipeline makes is one effctx reads: the counts agree.
        config.ignore_eos = True
        if decode is not None and not decode.greedy:
            config.do_sample = True
            config.temperature = decode.temperature
            config.top_p = decode.top_p
            if decode.seed is not None:
                config.rng_seed = decode.seed
        return config

    def _submit(self, tokens: Sequence[int], config: genai.GenerationConfig) -> Any:
        ids = ov.Tensor(np.asarray([tokens], dtype=np.int64))
        self._holds_blocks = self._prefix_caching
        try:
            return self._pipeline.add_request(next(self._request_ids), ids, config)
        except RuntimeError as exc:
            raise self._poison(f"openvino-genai refused the request: {first_line(exc)}") from None

    def _step(self) -> float:
        t0 = time.perf_counter_ns()
        try:
            self._pipeline.step()
        except RuntimeError as exc:
            raise self._poison(f"openvino-genai failed a step: {first_line(exc)}") from None
        return ms_since(t0)

    def _finish(self, handle: Any) -> None:
        """Let go of a request that is still running: cancelled, then stepped until the
        scheduler has freed its blocks."""
        if handle.get_status() == _RUNNING:
            handle.cancel()
            while self._pipeline.has_non_finished_requests():
                self._step()

    def _record(self, handle: Any, counted_input: int, counted_generated: int) -> None:
        metrics = handle.get_perf_metrics()
        self._last_request = RuntimeCounts(
            input_tokens=int(metrics.get_num_input_tokens()),
            generated_tokens=int(metrics.get_num_generated_tokens()),
            counted_input_tokens=counted_input,
            counted_generated_tokens=counted_generated,
            ttft_ms=float(metrics.get_ttft().mean),
            tpot_ms=float(metrics.get_tpot().mean),
        )

    def _runtime_counts(self) -> RuntimeCounts | None:
        return self._last_request

    # ------------------------------------------------------------------ the cache

    def _append(self, tokens: Sequence[int], stage: str, progress: ProgressSink | None) -> float:
        total = len(tokens)
        start = len(self._tape.resident)
        if not self._prefix_caching:
            # Nothing outlives a request: a prefill now would be computed again by the
            # next one. The tokens join the tape, and the request that decodes from them
            # computes them once (its time to first token carries the cost).
            self._tape.resident += [int(t) for t in tokens]
            if progress is not None:
                progress(PrefillProgress(stage, total, total, total, 0.0))
            return 0.0
        whole = self._tape.resident + [int(t) for t in tokens]
        handle = self._submit(whole, self._generation_config(1))
        elapsed, done = 0.0, 0
        try:
            while handle.get_status() == _RUNNING:
                ms = self._step()
                elapsed += ms
                # A step prefills at most n_batch tokens; blocks the prefix cache already
                # held are skipped, so the request may finish before `total`.
                chunk = total - done if handle.get_status() != _RUNNING else min(self._n_batch, total - done)
                done += chunk
                if progress is not None and chunk:
                    progress(PrefillProgress(stage, done, total, chunk, ms))
        except BaseException:
            self._finish(handle)
            self._tape.resident = whole[: start + done]
            raise
        self._record(handle, len(whole), 1)  # the one token a prefill request generates
        self._tape.resident = whole
        return elapsed

    def _truncate(self, keep: int) -> None:
        # Nothing to cut: the next request is the shorter tape, and the prefix cache
        # serves whatever blocks of it it still holds.
        del self._tape.resident[keep:]
        if keep == 0 and self._holds_blocks:
            # An empty tape is a cold start, but the pipeline's prefix cache would still
            # serve the start of an earlier prompt, and openvino-genai has no call that
            # empties it: a new pipeline does. The old one goes first, so the two caches
            # are never allocated at once.
            del self._pipeline
            try:
                self._pipeline = self._open_pipeline()
            except EffctxError as exc:
                raise self._poison(str(exc)) from None
            self._holds_blocks = False

    # ------------------------------------------------------------------ decoding

    def decode(self, config: DecodeConfig) -> Generator[TokenChunk, None, None]:
        """Stream the pipeline's tokens as its scheduler steps produce them; closing the
        generator cancels the request, leaving the last token handed out pending."""
        self._check_decode(config)
        tape = self._tape
        if not tape.resident and not tape.pending:
            raise EffctxError("nothing to decode from: the session holds no tokens")
        whole = tape.resident + tape.pending
        room = tape.n_ctx - len(whole)
        n_emit = config.max_tokens if config.slide else min(config.max_tokens, max(room + len(tape.pending), 1))
        handle = self._submit(whole, self._generation_config(n_emit, config))
        tape.reset(whole)
        text = self._vocabulary.text_decoder()
        index, received, step_ms = 0, 0, 0.0
        try:
            while index < n_emit:
                if not handle.can_read():
                    if handle.get_status() != _RUNNING:
                        break
                    step_ms = self._step()
                    continue
                for output in handle.read().values():
                    for token in output.generated_ids:
                        received += 1
                        t0 = time.perf_counter_ns()
                        if tape.pending:
                            tape.settle_pending()
                        if self._vocabulary.is_eog(token):
                            tape.pending = []
                            yield TokenChunk(token, text.flush(), index, step_ms + ms_since(t0), "eog")
                            return
                        tape.pending = [int(token)]
                        resident = len(tape.resident)
                        stop = tape.stop_reason(index, config)
                        piece = text.feed(token) + (text.flush() if stop else "")
                        ms = step_ms + ms_since(t0)
                        tape.counters.count_decode_time(ms)
                        step_ms = 0.0
                        yield TokenChunk(int(token), piece, index, ms, stop)
                        index += 1
                        if stop:
                            if resident < tape.n_ctx:
                                tape.settle_pending()
                            return
        finally:
            self._finish(handle)
            self._record(handle, len(whole), received)

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> SessionSnapshot:
        raise UnsupportedFeatureError(self._info.capabilities.state_snapshot.reason)

    def restore(self, snapshot: SessionSnapshot) -> None:
        raise UnsupportedFeatureError(self._info.capabilities.state_snapshot.reason)
