"""What every single-sequence session keeps the same way, whatever runs the model: the
token tape (resident tokens, then pending ones), the longest-common-prefix rule of
ensure_prefix, the decode loop's stop rules, the counters `explain` reports and the
poisoned / closed states. A backend subclasses `TapeSession` and supplies the cache
primitives: evaluate tokens into it, cut it back, refresh the next-token logits, sample.
"""

from __future__ import annotations

import time
from typing import Any, Generator, Mapping, Protocol, Sequence, TypedDict

import numpy as np

from effctx_core.contract import (
    ContextReport,
    DecodeConfig,
    ModelFacts,
    ModelInfo,
    PrefixCause,
    PrefixStatus,
    ProgressSink,
    ScoredSuffix,
    SessionSnapshot,
    SuffixStatus,
    TokenChunk,
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


class _Stats(TypedDict):
    prefill_calls: int
    prefill_tokens: int
    prefill_ms: float
    decode_calls: int
    decode_tokens: int
    decode_ms: float


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


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n], dtype=np.int64) != np.asarray(b[:n], dtype=np.int64))
    return int(diff[0]) if len(diff) else n


# How many logits are widened to float64 at once: 64 MiB of scratch. A whole chunk at once
# would be n_batch x n_vocab values (1 GiB for 512 positions of Gemma 3's 262144 tokens).
_SCORE_BLOCK_VALUES = 1 << 23


def token_logprobs(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """log softmax(logits[i])[targets[i]] for each row i, in float64 over the full
    vocabulary: logits (n, n_vocab), targets (n,) token ids; as many rows at a time as
    the scratch bound allows."""
    n, vocab = logits.shape
    ids = np.asarray(targets, dtype=np.intp)
    out = np.empty(n, dtype=np.float64)
    step = max(1, _SCORE_BLOCK_VALUES // vocab)
    for r in range(0, n, step):
        block = logits[r : r + step].astype(np.float64)
        block -= block.max(axis=1, keepdims=True)
        picked = block[np.arange(len(block)), ids[r : r + step]]
        np.exp(block, out=block)
        out[r : r + step] = picked - np.log(block.sum(axis=1))
    return out


class Sampler(Protocol):
    """What a session samples with (a backend's own type); freed when the reply ends."""

    def free(self) -> None: ...


class TapeSession:
    """The tape and its rules; subclasses own the cache behind it."""

    _info: ModelInfo
    identity: RuntimeIdentity

    def __init__(self, vocabulary: Vocabulary, n_ctx: int):
        self._vocabulary = vocabulary
        self._n_ctx = n_ctx
        self._resident: list[int] = []
        self._pending: list[int] = []
        # The next-token logits belong to the resident tape as it is now.
        self._logits_ok = False
        self._poisoned: str | None = None
        self._closed = False
        self._stats: _Stats = {"prefill_calls": 0, "prefill_tokens": 0, "prefill_ms": 0.0,
                               "decode_calls": 0, "decode_tokens": 0, "decode_ms": 0.0}

    # ------------------------------------------------------------------ what a backend supplies

    def _append(self, tokens: Sequence[int], stage: str, progress: ProgressSink | None) -> float:
        """Append tokens (at least one, and room for them) to the cache in chunks,
        reporting each, leaving the next-token logits of the last one; the milliseconds
        the backend spent."""
        raise NotImplementedError

    def _append_scored(self, tokens: Sequence[int], stage: str, progress: ProgressSink | None) -> tuple[float, np.ndarray]:
        """_append, also returning log p(tokens[i + 1] | the tape through tokens[i]) for each
        token but the last (len(tokens) - 1 values, float64): it needs the logits of every
        position, where _append keeps only the last one's. Only a backend whose
        capabilities claim token_scores supplies it."""
        raise NotImplementedError

    def _next_logits(self) -> np.ndarray:
        """The next-token logits of the resident tape (n_vocab values), while _logits_ok."""
        raise NotImplementedError

    def _truncate(self, keep: int) -> None:
        """Cut the cache back to its first `keep` tokens."""
        raise NotImplementedError

    def rollback_limit(self) -> int:
        """The shortest prefix the cache can be cut back to and still be exact: any, unless
        the backend's cache forgets positions (llama.cpp's sliding-window layers)."""
        return 0

    def _refresh_logits(self) -> None:
        """Make the next-token logits those of the resident tape again."""
        raise NotImplementedError

    def _open_sampler(self, config: DecodeConfig) -> Sampler:
        raise NotImplementedError

    def _next_token(self, sampler: Any) -> int:
        raise NotImplementedError

    # ------------------------------------------------------------------ shared

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def tokens(self) -> tuple[int, ...]:
        return tuple(self._resident) + tuple(self._pending)

    def tokenize(self, text: str, add_bos: bool, special: bool = False) -> list[int]:
        return self._vocabulary.tokenize(text, add_bos, special)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self._vocabulary.detokenize(tokens)

    def _check_usable(self) -> None:
        if self._closed:
            raise SessionFatalError("the session is closed")
        if self._poisoned:
            raise SessionFatalError(f"the session is poisoned ({self._poisoned}); reopen it")

    def _check_restorable(self, snapshot: SessionSnapshot) -> None:
        """A snapshot of another runtime identity, or longer than the context, is refused
        before the cache is touched."""
        self._check_usable()
        if snapshot.identity != self.identity:
            raise IdentityMismatchError(self.identity, snapshot.identity)
        if snapshot.n_tokens > self._n_ctx:
            raise ContextOverflowError("restore", 0, snapshot.n_tokens, self._n_ctx)

    def _poison(self, why: str) -> SessionFatalError:
        self._poisoned = why
        self._logits_ok = False
        return SessionFatalError(f"the session is poisoned ({why}); reopen it")

    def _eval(self, tokens: Sequence[int], stage: str, progress: ProgressSink | None) -> float:
        total = len(tokens)
        if total == 0:
            return 0.0
        start = len(self._resident)
        if start + total > self._n_ctx:
            raise ContextOverflowError(stage, start, total, self._n_ctx)
        return self._append(tokens, stage, progress)

    def _settle_pending(self) -> None:
        """The runtime evaluated the pending token (to sample the next one, or at a stop
        with room left): it is resident now, one decode step."""
        self._resident += self._pending
        self._pending = []
        self._stats["decode_calls"] += 1
        self._stats["decode_tokens"] += 1

    def _stop_reason(self, index: int, config: DecodeConfig) -> str | None:
        """Why the token at `index` ends the reply, if it does. The context filling is the
        truer reason when both hold: the engine shortens max_tokens to the room left, so
        it ends there too."""
        if self._n_ctx - len(self._resident) <= 1 and not config.slide:
            return "n_ctx"
        if index == config.max_tokens - 1:
            return "max_tokens"
        return None

    def ensure_prefix(self, prefix: Sequence[int], progress: ProgressSink | None = None) -> PrefixStatus:
        self._check_usable()
        prefix = list(prefix)
        if len(prefix) > self._n_ctx:
            raise ContextOverflowError("prefix", 0, len(prefix), self._n_ctx)
        before = len(self._resident)
        keep = common_prefix_length(self._resident, prefix)
        cause, diverged_at, floor = self._prefix_cause(before, keep, len(prefix)), None, None
        if keep < before:
            diverged_at = keep
            limit = self.rollback_limit()
            if keep < limit:
                cause, floor, keep = PrefixCause.ROLLBACK_LIMIT, limit, 0
            self._truncate(keep)
        self._pending = []
        t0 = time.perf_counter_ns()
        ms = self._eval(prefix[keep:], "prefix", progress)
        self._count_prefill(len(prefix) - keep, ms)
        return PrefixStatus(
            prefix_tokens=len(prefix),
            reused=keep,
            prefilled=len(prefix) - keep,
            dropped=before - keep,
            resident=len(self._resident),
            available=self._n_ctx - len(self._resident),
            prefill_ms=ms_since(t0) if len(prefix) > keep else 0.0,
            cause=cause,
            diverged_at=diverged_at,
            rollback_floor=floor,
        )

    @staticmethod
    def _prefix_cause(before: int, keep: int, wanted: int) -> PrefixCause:
        if before == 0:
            return PrefixCause.EMPTY
        if keep == before == wanted:
            return PrefixCause.IDENTICAL
        if keep == before:
            return PrefixCause.EXTENDS
        return PrefixCause.DIVERGED

    def _count_prefill(self, n: int, ms: float) -> None:
        if n:
            self._stats["prefill_calls"] += 1
            self._stats["prefill_tokens"] += n
            self._stats["prefill_ms"] += ms

    def prefill_suffix(self, suffix: Sequence[int], progress: ProgressSink | None = None) -> SuffixStatus:
        self._check_usable()
        todo = self._pending + list(suffix)
        if len(self._resident) + len(todo) > self._n_ctx:
            raise ContextOverflowError("prefill", len(self._resident), len(todo), self._n_ctx)
        t0 = time.perf_counter_ns()
        # Cleared first: a progress callback may stop the prefill between chunks, and the
        # chunks already done (pending tokens first) are resident by then.
        self._pending = []
        ms = self._eval(todo, "prefill", progress)
        self._count_prefill(len(todo), ms)
        return SuffixStatus(
            suffix_tokens=len(suffix),
            prefilled=len(todo),
            resident=len(self._resident),
            available=self._n_ctx - len(self._resident),
            prefill_ms=ms_since(t0) if todo else 0.0,
        )

    def score_suffix(self, suffix: Sequence[int], progress: ProgressSink | None = None) -> ScoredSuffix:
        self._check_usable()
        claim = self._info.capabilities.token_scores
        if not claim.supported:
            raise UnsupportedFeatureError(f"no token scores here: {claim.reason}")
        suffix = list(suffix)
        todo = self._pending + suffix
        if len(self._resident) + len(todo) > self._n_ctx:
            raise ContextOverflowError("prefill", len(self._resident), len(todo), self._n_ctx)
        t0 = time.perf_counter_ns()
        # The first suffix token is predicted by the logits held for the tape's last token;
        # after a cut or an eviction they are recomputed (its token evaluated again) on the
        # cache as it now is. A pending token is evaluated with the suffix, and its own row
        # predicts the first suffix token instead.
        first = np.full(1, np.nan)
        if suffix and not self._pending and self._resident:
            if not self._logits_ok:
                self._refresh_logits()
            first = token_logprobs(self._next_logits()[None, :], np.asarray(suffix[:1]))
        skip = len(self._pending)
        # Cleared first, as in prefill_suffix: chunks done before a stop are resident.
        self._pending = []
        ms, rest = self._append_scored(todo, "prefill", progress) if todo else (0.0, np.empty(0))
        self._count_prefill(len(todo), ms)
        status = SuffixStatus(
            suffix_tokens=len(suffix),
            prefilled=len(todo),
            resident=len(self._resident),
            available=self._n_ctx - len(self._resident),
            prefill_ms=ms_since(t0) if todo else 0.0,
        )
        logprobs = np.concatenate([first, rest])[skip:] if suffix else np.empty(0)
        return ScoredSuffix(status, logprobs)

    def decode(self, config: DecodeConfig) -> Generator[TokenChunk, None, None]:
        """Stream tokens; each is evaluated into the cache after it is handed out.

        A consumer that stops early leaves the last token it received pending: it is
        part of the tape and is evaluated by the next prefill.
        """
        self._check_usable()
        if self._pending:
            self.prefill_suffix([])
        if not self._logits_ok:
            if not self._resident:
                raise EffctxError("nothing to decode from: the session holds no tokens")
            self._refresh_logits()
        sampler = self._open_sampler(config)
        text = self._vocabulary.text_decoder()
        try:
            for index in range(config.max_tokens):
                t0 = time.perf_counter_ns()
                token = self._next_token(sampler)
                if self._vocabulary.is_eog(token):
                    yield TokenChunk(token, text.flush(), index, ms_since(t0), "eog")
                    return
                self._pending = [token]
                stop = self._stop_reason(index, config)
                piece = text.feed(token) + (text.flush() if stop else "")
                sample_ms = ms_since(t0)
                yield TokenChunk(token, piece, index, sample_ms, stop)
                if len(self._resident) >= self._n_ctx:
                    if config.slide:
                        raise ContextOverflowError("decode", len(self._resident), 1, self._n_ctx)
                    return  # no slot left to evaluate it: it stays pending
                t1 = time.perf_counter_ns()
                self._eval([token], "decode", None)
                self._pending = []
                self._stats["decode_calls"] += 1
                self._stats["decode_tokens"] += 1
                self._stats["decode_ms"] += sample_ms + ms_since(t1)
                if stop:
                    return
        finally:
            sampler.free()

    def close(self) -> None:
        self._closed = True

    def explain(self) -> ContextReport:
        s = self._stats
        resident = len(self._resident)
        return ContextReport(
            resident_tokens=resident,
            pending_tokens=len(self._pending),
            available_tokens=self._n_ctx - resident,
            n_ctx=self._n_ctx,
            prefill_calls=s["prefill_calls"],
            prefill_tokens=s["prefill_tokens"],
            prefill_ms=s["prefill_ms"],
            decode_calls=s["decode_calls"],
            decode_tokens=s["decode_tokens"],
            decode_ms=s["decode_ms"],
            poisoned=self._poisoned is not None,
            rollback_floor=self.rollback_limit(),
        )
