"""A llama.cpp session on llama-cpp-python's low-level C API: one sequence, its cache and
its token tape, kept in step."""

from __future__ import annotations

import ctypes
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

import numpy as np

from effctx_core.backends.cache_session import CacheSession, check_trained_context, session_identity
from effctx_core.backends.common.limits import trained_limit
from effctx_core.backends.decode_loop import InProcessDecode, token_logprobs
from effctx_core.backends.gguf.binding import llama_cpp
from effctx_core.backends.gguf.context import KV_CACHE_TYPES, QUANTIZED_TYPES
from effctx_core.backends.gguf.runtime import (
    Batch,
    DeferredInterrupt,
    LoadedModel,
    clear_llama_errors,
    llama_error_reason,
)
from effctx_core.backends.gguf.sampling import Sampler
from effctx_core.backends.llama.settings import kv_settings, options_of
from effctx_core.contract import (
    OBSERVED,
    Capabilities,
    Capability,
    ContextLimit,
    DecodeConfig,
    DeviceShare,
    ModelInfo,
    PrefillProgress,
    ProgressSink,
    ResidencyMap,
    SessionSnapshot,
    StateCosts,
)
from effctx_core.errors import ContextOverflowError, EffctxError
from effctx_core.units import format_bytes, format_count, format_counted, ms_since

if TYPE_CHECKING:
    # The profile is read, never built, here: the backends sit below the profile schema.
    from effctx_core.profiles import Profile

SEQ = 0
# The stages that append input (a prefix's rest, a suffix), not a decode step.
INPUT_STAGES = frozenset({"prefix", "prefill"})
# Memory for the states kept at the starts of chunks of input, which a cut below the
# rollback floor restarts from: 256 MiB holds 13 of them at 4k tokens on Gemma 3 270M
# (19.5 MiB each), 2 at 32k.
ANCHOR_BYTES = 256 << 20
_DECODE_NO_SLOT = 1


def compact_span(n_swa: int) -> int:
    """The windowed positions held at which the next chunk of input begins by cutting them
    to the window: a window and a half. Half a window (256 positions on Gemma 3) less to
    attend over saves more in one chunk of input, or in the decode steps after a short
    one, than the state copy and load cost (4-9 ms at 1.5k-3.5k tokens)."""
    return n_swa + n_swa // 2


def context_params(profile: Profile) -> llama_cpp.llama_context_params:
    """llama.cpp's context parameters for a profile: one sequence, ubatch = batch."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = profile.n_ctx
    params.n_batch = profile.n_batch
    params.n_ubatch = profile.n_batch
    params.n_seq_max = 1
    params.n_threads = profile.n_threads
    params.n_threads_batch = profile.n_threads
    options = options_of(profile)
    params.flash_attn_type = (
        llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if options.flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    params.type_k = KV_CACHE_TYPES[profile.kv_cache_type_k]
    params.type_v = KV_CACHE_TYPES[profile.kv_cache_type_v]
    params.swa_full = options.swa_full
    params.no_perf = True
    return params


class LlamaSession(InProcessDecode, CacheSession):
    def __init__(self, model: LoadedModel, profile: Profile, backend_version: str):
        facts = model.facts
        check_trained_context(profile.n_ctx, model.n_ctx_train)
        self._model = model
        self._profile = profile
        params = context_params(profile)
        clear_llama_errors()
        with DeferredInterrupt() as deferred:
            ctx = llama_cpp.llama_init_from_model(model.model, params)
        if deferred.hit:
            if ctx:
                llama_cpp.llama_free(ctx)
            raise KeyboardInterrupt
        if not ctx:
            raise EffctxError(
                f"llama.cpp could not create a context for profile {profile.name!r}: "
                + llama_error_reason("no reason given")
            )
        super().__init__(model, int(llama_cpp.llama_n_ctx(ctx)))
        self._ctx = ctx
        self._mem = llama_cpp.llama_get_memory(ctx)
        self._batch = Batch(profile.n_batch)
        self._logits_ok = False
        # Logits restored from a snapshot; used for the next sample instead of the
        # context's own, which belong to whatever ran before the restore.
        self._logits_override: np.ndarray | None = None
        # Lowest position the sliding-window layers still hold after a sequence-state
        # restore, which keeps only the last n_swa of them even with swa_full.
        self._restore_floor = 0
        # With swa_full the windowed layers keep every position, which makes a cut anywhere
        # exact, and without flash attention their attention then runs over all of them,
        # masked: at 2.5k tokens on Gemma 3 about a quarter of a turn. (ggml's flash-attention
        # kernel skips masked cells: q8's cold TTFT at 8k was the same trimmed or not.) Where
        # no policy shifts positions and states stay in this process, the sequence's own
        # state is loaded back before a chunk of input once they hold half a window more
        # than it: the load keeps only the window. A cut below where that happened restarts
        # from a state kept at a chunk's start (_tidy).
        options = options_of(profile)
        self._compacts = (bool(model.n_swa) and options.swa_full and options.trim_windows and not options.flash_attn
                          and not model.is_recurrent and profile.residency.policy == "none")
        self._anchors: list[tuple[int, np.ndarray]] = []  # (tape length, its state), ascending
        self.identity = session_identity("llama", backend_version, facts, kv_settings(profile),
                                         profile.residency.identity_key)
        self._info = self._build_info(backend_version)

    # ------------------------------------------------------------------ description

    def _build_info(self, backend_version: str) -> ModelInfo:
        facts, profile = self._model.facts, self._profile
        n_swa = self._model.n_swa
        can_shift = bool(llama_cpp.llama_memory_can_shift(self._mem))
        notes = {}
        if facts.sliding_window and facts.sliding_window != n_swa:
            notes["sliding_window"] = (
                f"GGUF says {facts.sliding_window}, llama.cpp uses {n_swa}: llama.cpp's value is used"
            )
        elif n_swa:
            notes["sliding_window"] = f"GGUF and llama_model_n_swa agree: {n_swa}"
        if not n_swa:
            floor, floor_reason = None, "every layer attends globally"
        elif self._compacts:
            floor, floor_reason = n_swa, (
                f"swa_full holds every windowed position until there are {format_count(compact_span(n_swa))}; the "
                f"next chunk of input then reloads the session's state, which keeps the last {n_swa}; a cut further "
                f"back restarts from a state kept at a chunk start ({format_bytes(ANCHOR_BYTES)} of them at most)"
            )
        elif options_of(profile).swa_full:
            floor, floor_reason = None, "swa_full keeps every sliding-window position"
        else:
            floor, floor_reason = n_swa, f"the sliding-window layers keep only the last {n_swa} positions"
        fa = options_of(profile).flash_attn
        capabilities = Capabilities(
            position_shift=Capability(can_shift, (
                "llama_memory_can_shift is true for this context" if can_shift
                else "llama_memory_can_shift is false"
                + (" (a sliding-window cache without swa_full cannot shift)" if n_swa and not options_of(profile).swa_full else "")
            )),
            state_snapshot=Capability(True, "llama_state_seq_get_data / set_data save and load the sequence"),
            exact_snapshot=Capability(not fa, (
                "flash attention is off: restore + re-decode gives identical logits" if not fa
                else "flash attention is on: restored state drifts (measured max|dlogit| about 1)"
            )),
            attention_scores=Capability(False, "llama.cpp's C API does not expose attention weights"),
            token_scores=Capability(True, "llama_decode computes the logits of every position a batch asks for "
                                          "(llama_get_logits)"),
            quantized_k=Capability(True, f"llama.cpp takes {', '.join(QUANTIZED_TYPES)} for K"),
            quantized_v=Capability(fa, (
                "flash attention is on" if fa
                else "needs flash attention: llama.cpp refuses a quantized V cache without it"
            )),
            constrained_decoding=Capability(True, "llama.cpp's grammar sampler (GBNF) runs before effctx's sampler "
                                                  "chain"),
            decode_logprobs=Capability(True, "the next-token logits are in this process: their log-softmax over "
                                             "the vocabulary, in float64"),
            rollback_floor=floor,
            rollback_reason=floor_reason,
            residency_map=ResidencyMap(OBSERVED, "effctx's executor edits the cache and knows each block it holds"),
            notes=notes,
        )
        limits = [
            trained_limit(facts, self._model.n_ctx_train),
            ContextLimit(
                "n_ctx",
                self._tape.n_ctx,
                f"profile {profile.name!r} allocates a KV cache of {format_counted(self._tape.n_ctx, 'token')}"
                + (f" (asked {format_count(profile.n_ctx)}, llama.cpp padded it)" if self._tape.n_ctx != profile.n_ctx else ""),
            ),
        ]
        return ModelInfo(
            facts=facts,
            backend="llama",
            backend_version=backend_version,
            identity=self.identity,
            # llama-cpp-python is built here without a GPU backend and loads no layers
            # onto one (n_gpu_layers 0): every tensor and the cache are in host memory.
            device="cpu",
            n_ctx=self._tape.n_ctx,
            capabilities=capabilities,
            limits=tuple(limits),
        )

    @property
    def model(self) -> LoadedModel:
        return self._model

    def place(self, device: str, placement: tuple[DeviceShare, ...], costs: StateCosts) -> ModelInfo:
        """Say where the session really runs (RPC workers, as llama.cpp placed it) and what
        its states cost there; returns the new info."""
        caps = self._info.capabilities
        snapshot = Capability(True, f"{caps.state_snapshot.reason}; over RPC each KV slice is one network call "
                                    f"({costs.text})")
        # Over RPC a state copy crosses the network both ways: the windowed layers keep
        # every position (swa_full's rollback floor is gone again).
        floor, floor_reason = caps.rollback_floor, caps.rollback_reason
        if self._compacts:
            self._compacts = False
            floor, floor_reason = None, "swa_full keeps every sliding-window position"
        self._info = replace(self._info, device=device, placement=placement, state_costs=costs,
                             capabilities=replace(caps, state_snapshot=snapshot, rollback_floor=floor,
                                                  rollback_reason=floor_reason))
        return self._info

    def _oldest_swa_position(self) -> int:
        held = int(llama_cpp.llama_memory_seq_pos_min(self._mem, SEQ))
        return max(held, self._restore_floor, 0)

    def rollback_limit(self) -> int:
        """The shortest prefix the cache can be cut back to and still be exact.

        A sliding-window layer drops positions older than the window as the tape grows;
        cut back below the oldest one it holds plus the window, it would attend to
        positions it no longer has."""
        n = len(self._tape.resident)
        n_swa = self._model.n_swa
        if n == 0:
            return 0
        if self._model.is_recurrent:
            return n
        if not n_swa:
            return 0
        oldest = self._oldest_swa_position()
        if options_of(self._profile).swa_full and oldest == 0:
            return 0
        return min(n, oldest + n_swa)

    def _truncate(self, keep: int) -> None:
        if keep >= len(self._tape.resident):
            return
        if keep == 0:
            llama_cpp.llama_memory_seq_rm(self._mem, SEQ, -1, -1)
            self._restore_floor = 0
        elif not llama_cpp.llama_memory_seq_rm(self._mem, SEQ, keep, -1):
            raise self._poison(f"llama.cpp refused to remove positions {keep}.. from the cache")
        del self._tape.resident[keep:]
        self._drop_anchors_after(keep)
        self._logits_ok = False
        self._logits_override = None

    def remove_range(self, start: int, end: int) -> float:
        """Take cache positions [start, end) out and shift the later ones down.

        Only where the context can shift; the residency executor checks that first.
        """
        self._check_usable()
        if not 0 <= start < end <= len(self._tape.resident):
            raise EffctxError(f"cannot remove positions [{start}, {end}) from a cache of {len(self._tape.resident)}")
        t0 = time.perf_counter_ns()
        if not llama_cpp.llama_memory_seq_rm(self._mem, SEQ, start, end):
            raise self._poison(f"llama.cpp refused to remove positions [{start}, {end})")
        if end < len(self._tape.resident):
            llama_cpp.llama_memory_seq_add(self._mem, SEQ, end, -1, start - end)
        del self._tape.resident[start:end]
        self._anchors.clear()  # positions after the range moved
        self._logits_ok = False
        self._logits_override = None
        pos_max = int(llama_cpp.llama_memory_seq_pos_max(self._mem, SEQ))
        if pos_max != len(self._tape.resident) - 1:
            raise self._poison(f"after removing [{start}, {end}) the cache ends at {pos_max}, expected {len(self._tape.resident) - 1}")
        return ms_since(t0)

    # ------------------------------------------------------------------ evaluation

    def _append(self, tokens: Sequence[int], stage: str, progress: ProgressSink | None) -> float:
        """Append tokens to the cache in n_batch chunks; logits for the last one."""
        return self._chunks(tokens, stage, progress, None, tidy=stage in INPUT_STAGES)

    def _append_scored(self, tokens: Sequence[int], stage: str, progress: ProgressSink | None) -> tuple[float, np.ndarray]:
        """Append tokens with the logits of every position of each chunk. llama.cpp keeps
        an output buffer of n_batch x n_vocab floats for that (512 MiB at 512 x 262144),
        and holds on to it until the context is freed."""
        scores = np.empty(len(tokens) - 1, dtype=np.float64)
        return self._chunks(tokens, stage, progress, scores, tidy=False), scores

    def _chunks(self, tokens: Sequence[int], stage: str, progress: ProgressSink | None,
                scores: np.ndarray | None, tidy: bool) -> float:
        """The n_batch chunk loop; with `scores`, every position's logits are asked for and
        each chunk's rows score the token after them into it; with `tidy`, each chunk
        begins with _tidy."""
        total = len(tokens)
        start = len(self._tape.resident)
        arr = np.asarray(tokens, dtype=np.int32)
        clear_llama_errors()
        self._logits_override = None
        n_batch = self._batch.capacity
        elapsed = 0.0
        for off in range(0, total, n_batch):
            chunk = arr[off : off + n_batch]
            if scores is None:
                self._batch.fill(chunk, start + off, want_logits=off + len(chunk) >= total)
            else:
                self._batch.fill_every_logit(chunk, start + off)
            if tidy:
                self._tidy()
            t0 = time.perf_counter_ns()
            rc = llama_cpp.llama_decode(self._ctx, self._batch.raw)
            if rc != 0:
                self._recover_failed_eval(rc, stage, start, total)
            if scores is not None:
                # Row j predicts the token after chunk[j]; the last row of the whole append
                # predicts one not given yet and stays as the next-token logits.
                targets = arr[off + 1 : off + len(chunk) + 1]
                rows = np.ctypeslib.as_array(llama_cpp.llama_get_logits(self._ctx), shape=(len(chunk), self._model.n_vocab))
                scores[off : off + len(targets)] = token_logprobs(rows[: len(targets)], targets)
            ms = ms_since(t0)
            self._tape.resident.extend(tokens[off : off + len(chunk)])
            elapsed += ms
            if progress is not None:
                progress(PrefillProgress(stage, off + len(chunk), total, len(chunk), ms))
        self._logits_ok = True
        return elapsed

    def _recover_failed_eval(self, rc: int, stage: str, start: int, total: int) -> None:
        # llama_decode commits each ubatch as it goes: the chunks before the failing one
        # are in the cache. Take them back when that is exact, so the call leaves the
        # session as it was.
        committed = len(self._tape.resident)
        if committed > start:
            if self.rollback_limit() <= start and llama_cpp.llama_memory_seq_rm(self._mem, SEQ, start, -1):
                del self._tape.resident[start:]
                self._drop_anchors_after(start)
                self._logits_ok = False
            elif self._anchor_at_most(start)[0] == start:
                self._restart(start)  # the append's first chunk kept its start
            else:
                raise self._poison(f"llama_decode returned {rc} after {committed - start} tokens were committed")
        else:
            # llama_decode leaves the cache unchanged when the first ubatch fails;
            # the logits it held are stale all the same.
            self._logits_ok = False
        if rc == _DECODE_NO_SLOT:
            raise ContextOverflowError(stage, start, total, self._tape.n_ctx)
        raise self._poison(f"llama_decode returned {rc}: {llama_error_reason('inconsistent positions or batch')}")

    def _refresh_logits(self) -> None:
        # After any KV edit or restore the context's logits belong to another state (the
        # last batch evaluated before it): drop the last position and decode its token again.
        last = len(self._tape.resident) - 1
        if not llama_cpp.llama_memory_seq_rm(self._mem, SEQ, last, -1):
            raise self._poison("llama.cpp refused to remove the last position for a logits refresh")
        token = self._tape.resident.pop()
        self._eval([token], "refresh", None)

    # ------------------------------------------------------------------ sampling

    def _open_sampler(self, config: DecodeConfig) -> Sampler:
        return Sampler(config, self._model.vocab)

    def _next_token(self, sampler: Sampler) -> int:
        if self._logits_override is not None:
            return sampler.from_logits(self._logits_override)
        return sampler.from_context(self._ctx)

    # ------------------------------------------------------------------ snapshots

    def _next_logits(self) -> np.ndarray:
        if self._logits_override is not None:
            return self._logits_override
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self._model.n_vocab,))

    def _current_logits(self) -> bytes | None:
        if self._logits_override is None and not self._logits_ok:
            return None
        return self._next_logits().tobytes()

    def _state_copy(self) -> np.ndarray:
        size = llama_cpp.llama_state_seq_get_size(self._ctx, SEQ)
        # Not zeroed first (a ctypes array would be): llama.cpp writes every byte it
        # reports, and a turn's checkpoint copies 15-21 MB on the turn's time.
        buf = np.empty(size, dtype=np.uint8)
        written = llama_cpp.llama_state_seq_get_data(self._ctx, buf.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
                                                     size, SEQ)
        if written == 0 and self._tape.resident:
            raise EffctxError("llama.cpp wrote no state for the sequence")
        return buf[:written]

    def _load_state(self, state: np.ndarray, n_tokens: int, what: str) -> None:
        """Empty the cache and load a sequence state into it. A load keeps only the last
        n_swa positions of the windowed layers, swa_full or not: the floor rises to there.
        The context's logits belong to whatever ran before."""
        llama_cpp.llama_memory_seq_rm(self._mem, SEQ, -1, -1)
        self._logits_ok = False
        self._logits_override = None
        loaded = llama_cpp.llama_state_seq_set_data(self._ctx, state.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
                                                    len(state), SEQ)
        if loaded != len(state):
            raise self._poison(f"llama.cpp could not load the {what} state ({loaded} of {len(state)} bytes)")
        pos_max = int(llama_cpp.llama_memory_seq_pos_max(self._mem, SEQ))
        if pos_max != n_tokens - 1:
            raise self._poison(f"the loaded {what} state ends at position {pos_max}, its token list at {n_tokens - 1}")
        n_swa = self._model.n_swa
        self._restore_floor = max(0, n_tokens - n_swa) if n_swa else 0

    def _tidy(self) -> None:
        """Before a chunk of input: keep the state at its start, and load it back once the
        windowed layers hold compact_span positions, which leaves them only the window."""
        n = len(self._tape.resident)
        if not self._compacts or n == 0:
            return
        compact = n - self._oldest_swa_position() >= compact_span(self._model.n_swa)
        kept = bool(self._anchors) and self._anchors[-1][0] == n
        if kept and not compact:
            return
        state = self._anchors[-1][1] if kept else self._state_copy()
        if compact:
            self._load_state(state, n, "sequence's own")
        if not kept:
            self._keep_anchor(n, state)

    def _keep_anchor(self, n: int, state: np.ndarray) -> None:
        """Keep the state at tape length n; over the budget, the kept state whose loss
        leaves the shortest span without one goes (never the newest)."""
        anchors = self._anchors
        anchors.append((n, state))
        while len(anchors) > 1 and sum(len(a[1]) for a in anchors) > ANCHOR_BYTES:
            starts = [0] + [a[0] for a in anchors]
            spans = [starts[i + 2] - starts[i] for i in range(len(anchors) - 1)]
            del anchors[spans.index(min(spans))]

    def _anchor_at_most(self, at: int) -> tuple[int, np.ndarray | None]:
        return next(((n, state) for n, state in reversed(self._anchors) if n <= at), (0, None))

    def _drop_anchors_after(self, n: int) -> None:
        self._anchors = [a for a in self._anchors if a[0] <= n]

    def _restart(self, at: int) -> int:
        n, state = self._anchor_at_most(at)
        if state is None:
            self._truncate(0)
            return 0
        self._load_state(state, n, "kept")
        del self._tape.resident[n:]
        self._drop_anchors_after(n)
        return n

    def _restart_points(self) -> tuple[int, ...]:
        floor = self.rollback_limit()
        return tuple(n for n, _ in self._anchors if n < floor)

    def snapshot(self) -> SessionSnapshot:
        self._check_usable()
        return SessionSnapshot(self.identity, tuple(self._tape.resident), self._state_copy().tobytes(),
                               self._current_logits(), tuple(self._tape.pending))

    def restore(self, snapshot: SessionSnapshot) -> None:
        self._check_restorable(snapshot)
        self._tape.reset()
        self._anchors.clear()
        if not snapshot.tokens:
            llama_cpp.llama_memory_seq_rm(self._mem, SEQ, -1, -1)
            self._logits_ok = False
            self._restore_floor = 0
            return
        self._load_state(np.frombuffer(snapshot.state, dtype=np.uint8), snapshot.n_tokens, "snapshot")
        self._tape.reset(snapshot.tokens, snapshot.pending)
        if snapshot.logits is not None and len(snapshot.logits) == 4 * self._model.n_vocab:
            self._logits_override = np.frombuffer(snapshot.logits, dtype=np.float32).copy()
            self._logits_ok = True

    def _release(self) -> None:
        self._batch.free()
        llama_cpp.llama_free(self._ctx)
