"""The session contract's tape operations over a cache the backend supplies: a backend
subclasses `CacheSession` with the cache primitives (evaluate tokens into it, cut it back),
and the session holds its `Tape`. The closed and poisoned states are kept here too.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Mapping, Protocol, Sequence

import numpy as np

from effctx_core.backends.tape import Tape
from effctx_core.contract import (
    ContextReport,
    DecodeConfig,
    ModelFacts,
    ModelInfo,
    PrefixCause,
    PrefixStatus,
    ProgressSink,
    RuntimeCounts,
    ScoredSuffix,
    SessionSnapshot,
    SuffixStatus,
)
from effctx_core.errors import (
    ContextOverflowError,
    EffctxError,
    SessionFatalError,
    UnsupportedFeatureError,
)
from effctx_core.identity import IdentityMismatchError, RuntimeIdentity, Setting
from effctx_core.transcript import chat_format_for
from effctx_core.units import ms_since


class TextDecoder(Protocol):
    def feed(self, token: int) -> str: ...

    def flush(self) -> str: ...


class Vocabulary(Protocol):
    """The tokenizer a session speaks: text to ids and back, and which ids end a turn."""

    def tokenize(self, text: str, add_bos: bool, special: bool = False) -> list[int]: ...

    def detokenize(self, tokens: Sequence[int]) -> str: ...

    def is_eog(self, token: int) -> bool: ...

    def text_decoder(self) -> TextDecoder: ...


def check_trained_context(n_ctx: int, trained: int) -> None:
    if n_ctx > trained:
        raise EffctxError(f"n_ctx {n_ctx} is above the model's trained context length {trained}")


def session_identity(backend: str, backend_version: str, facts: ModelFacts, kv_settings: Mapping[str, Setting],
                     residency: str) -> RuntimeIdentity:
    """The identity of a session of this model: what keys its snapshots."""
    return RuntimeIdentity.build(
        backend=backend,
        backend_version=backend_version,
        model_sha256=facts.sha256,
        kv_settings=kv_settings,
        residency=residency,
        prompt_template=chat_format_for(facts).identity,
        add_bos=facts.add_bos,
    )


class CacheSession:
    """The tape's rules applied to the cache behind it. A subclass sets `_info` and
    `identity` once it knows them."""

    _info: ModelInfo
    identity: RuntimeIdentity

    def __init__(self, vocabulary: Vocabulary, n_ctx: int):
        self._vocabulary = vocabulary
        self._tape = Tape(n_ctx)
        self._poisoned: str | None = None
        self._closed = False

    # ------------------------------------------------------------------ what a backend supplies

    def _append(self, tokens: Sequence[int], stage: str, progress: ProgressSink | None) -> float:
        """Append tokens (at least one, and room for them) to the cache in chunks, each
        resident on the tape as it is done and reported; the milliseconds the backend spent."""
        raise NotImplementedError

    def _append_scored(self, tokens: Sequence[int], stage: str, progress: ProgressSink | None) -> tuple[float, np.ndarray]:
        """_append, also returning log p(tokens[i + 1] | the tape through tokens[i]) for each
        token but the last (len(tokens) - 1 values, float64). Only a backend whose
        capabilities claim token_scores supplies it, and _first_score with it."""
        raise NotImplementedError

    def _restart(self, at: int) -> int:
        """The cache cannot be cut back to `at` tokens exactly: restart it from the longest
        state the backend keeps for a start of the tape no longer than that, or empty it.
        Returns the tokens it holds then."""
        self._truncate(0)
        return 0

    def _restart_points(self) -> tuple[int, ...]:
        """The tape lengths below the rollback floor that `_restart` can start from."""
        return ()

    def _first_score(self, token: int) -> float:
        """log p(token | the resident tape), which is not empty and has nothing pending."""
        raise NotImplementedError

    def _truncate(self, keep: int) -> None:
        """Cut the cache and the resident tape back to their first `keep` tokens."""
        raise NotImplementedError

    def rollback_limit(self) -> int:
        """The shortest prefix the cache can be cut back to and still be exact: any, unless
        the backend's cache forgets positions (llama.cpp's sliding-window layers)."""
        return 0

    def _runtime_counts(self) -> RuntimeCounts | None:
        """The runtime's own account of its last request, where it gives one."""
        return None

    def _release(self) -> None:
        """Free what the runtime holds for the session; called once, by close."""

    # ------------------------------------------------------------------ the contract

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def tokens(self) -> tuple[int, ...]:
        return self._tape.tokens

    def tokenize(self, text: str, add_bos: bool, special: bool = False) -> list[int]:
        return self._vocabulary.tokenize(text, add_bos, special)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self._vocabulary.detokenize(tokens)

    def ensure_prefix(self, prefix: Sequence[int], progress: ProgressSink | None = None) -> PrefixStatus:
        self._check_usable()
        tape = self._tape
        prefix = list(prefix)
        cut = tape.cut_for(prefix, self.rollback_limit)
        if cut.cause is PrefixCause.ROLLBACK_LIMIT:
            assert cut.diverged_at is not None
            kept = self._restart(cut.diverged_at)
            if kept:
                cut = replace(cut, keep=kept, dropped=cut.dropped - kept, cause=PrefixCause.RESTORED)
        elif cut.diverged_at is not None:
            self._truncate(cut.keep)
        carried, tape.pending = tape.pending[:cut.held], []
        rest = prefix[cut.keep + cut.held:]
        t0 = time.perf_counter_ns()
        if rest:
            ms = self._eval(carried + rest, "prefix", progress)
            tape.counters.count_prefill(len(rest), ms)
            tape.counters.count_carried(len(carried))
        else:
            # Nothing after them: pending tokens the prefix ends on stay pending, for the
            # next prefill to evaluate in its batch.
            tape.pending = carried
        prefilled = len(rest)
        return PrefixStatus(
            prefix_tokens=len(prefix),
            reused=cut.keep + cut.held,
            prefilled=prefilled,
            dropped=cut.dropped,
            resident=len(tape.resident),
            available=tape.available,
            prefill_ms=ms_since(t0) if prefilled else 0.0,
            cause=cut.cause,
            diverged_at=cut.diverged_at,
            rollback_floor=cut.rollback_floor,
            pending=len(tape.pending),
        )

    def prefill_suffix(self, suffix: Sequence[int], progress: ProgressSink | None = None) -> SuffixStatus:
        self._check_usable()
        tape = self._tape
        suffix = list(suffix)
        carried = tape.pending
        todo = carried + suffix
        tape.check_room("prefill", len(todo))
        t0 = time.perf_counter_ns()
        # Cleared first: a progress callback may stop the prefill between chunks, and the
        # chunks already done (pending tokens first) are resident by then.
        tape.pending = []
        ms = self._eval(todo, "prefill", progress)
        tape.counters.count_prefill(len(suffix), ms)
        tape.counters.count_carried(len(carried))
        return self._suffix_status(len(suffix), t0)

    def score_suffix(self, suffix: Sequence[int], progress: ProgressSink | None = None) -> ScoredSuffix:
        self._check_usable()
        claim = self._info.capabilities.token_scores
        if not claim.supported:
            raise UnsupportedFeatureError(f"no token scores here: {claim.reason}")
        tape = self._tape
        suffix = list(suffix)
        todo = tape.pending + suffix
        tape.check_room("prefill", len(todo))
        t0 = time.perf_counter_ns()
        # A pending token is evaluated with the suffix, and its own score predicts the
        # first suffix token; with none, the resident tape predicts it.
        first = np.full(1, np.nan)
        if suffix and not tape.pending and tape.resident:
            first[0] = self._first_score(suffix[0])
        skip = len(tape.pending)
        # Cleared first, as in prefill_suffix: chunks done before a stop are resident.
        tape.pending = []
        ms, rest = self._append_scored(todo, "prefill", progress) if todo else (0.0, np.empty(0))
        tape.counters.count_prefill(len(suffix), ms)
        tape.counters.count_carried(skip)
        logprobs = np.concatenate([first, rest])[skip:] if suffix else np.empty(0)
        return ScoredSuffix(self._suffix_status(len(suffix), t0), logprobs)

    def explain(self) -> ContextReport:
        return self._tape.report(self._poisoned is not None, self.rollback_limit(), self._runtime_counts(),
                                 self._restart_points())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._release()

    # ------------------------------------------------------------------ for subclasses

    def _check_usable(self) -> None:
        if self._closed:
            raise SessionFatalError("the session is closed")
        if self._poisoned:
            raise SessionFatalError(f"the session is poisoned ({self._poisoned}); reopen it")

    def _check_decode(self, config: DecodeConfig) -> None:
        """A decode asking for what the capabilities do not claim is refused before a
        token is decoded, with the capability's reason: never quietly ignored."""
        self._check_usable()
        caps = self._info.capabilities
        if config.grammar is not None and not caps.constrained_decoding.supported:
            raise UnsupportedFeatureError(f"no constrained decoding here: {caps.constrained_decoding.reason}")
        if config.logprobs is not None and not caps.decode_logprobs.supported:
            raise UnsupportedFeatureError(f"no decode logprobs here: {caps.decode_logprobs.reason}")

    def _check_restorable(self, snapshot: SessionSnapshot) -> None:
        """A snapshot of another runtime identity, or longer than the context, is refused
        before the cache is touched."""
        self._check_usable()
        if snapshot.identity != self.identity:
            raise IdentityMismatchError(self.identity, snapshot.identity)
        if snapshot.n_tokens > self._tape.n_ctx:
            raise ContextOverflowError("restore", 0, snapshot.n_tokens, self._tape.n_ctx)

    def _poison(self, why: str) -> SessionFatalError:
        self._poisoned = why
        return SessionFatalError(f"the session is poisoned ({why}); reopen it")

    def _eval(self, tokens: Sequence[int], stage: str, progress: ProgressSink | None) -> float:
        if len(tokens) == 0:
            return 0.0
        self._tape.check_room(stage, len(tokens))
        return self._append(tokens, stage, progress)

    def _suffix_status(self, suffix_tokens: int, t0: int) -> SuffixStatus:
        # Pending tokens evaluated with the suffix are counted as decode steps, not here.
        return SuffixStatus(
            suffix_tokens=suffix_tokens,
            prefilled=suffix_tokens,
            resident=len(self._tape.resident),
            available=self._tape.available,
            prefill_ms=ms_since(t0) if suffix_tokens else 0.0,
        )
