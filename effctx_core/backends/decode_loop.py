"""What a session shares whose process holds the next-token logits (llama.cpp, OpenVINO's
stateful cache): the decode loop that samples them, evaluating each token after it is
handed out, and the score of the token after the tape. A remote runtime (llama-server) or
a scheduler that samples for itself (openvino-genai) streams its own tokens instead.
"""

from __future__ import annotations

import time
from typing import Any, Generator, Protocol, Sequence

import numpy as np

from effctx_core.backends.cache_session import Vocabulary
from effctx_core.backends.tape import Tape
from effctx_core.contract import DecodeConfig, ProgressSink, SuffixStatus, TokenChunk
from effctx_core.errors import ContextOverflowError, EffctxError
from effctx_core.units import ms_since

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


def next_token_logprobs(logits: np.ndarray, token: int, k: int) -> tuple[float, tuple[tuple[int, float], ...]]:
    """log softmax(logits)[token] in float64 over the full vocabulary, and the k likeliest
    tokens as (id, log-probability), likeliest first (ties by id)."""
    shifted = logits.astype(np.float64)
    shifted -= shifted.max()
    log_total = np.log(np.exp(shifted).sum())
    k = min(k, len(shifted))
    if k == 0:
        return float(shifted[token] - log_total), ()
    ids = np.argpartition(-shifted, k - 1)[:k]
    ids = ids[np.lexsort((ids, -shifted[ids]))]
    return float(shifted[token] - log_total), tuple((int(i), float(shifted[i] - log_total)) for i in ids)


class Sampler(Protocol):
    """What a session samples with (a backend's own type); freed when the reply ends."""

    def free(self) -> None: ...


class _LogitsSession(Protocol):
    """The session InProcessDecode is mixed into: a CacheSession, and the primitives of
    logits it holds."""

    _tape: Tape
    _vocabulary: Vocabulary
    # The next-token logits belong to the resident tape as it is now.
    _logits_ok: bool

    def _check_decode(self, config: DecodeConfig) -> None: ...

    def _eval(self, tokens: Sequence[int], stage: str, progress: ProgressSink | None) -> float: ...

    def prefill_suffix(self, suffix: Sequence[int], progress: ProgressSink | None = None) -> SuffixStatus: ...

    def _refresh_logits(self) -> None:
        """Make the next-token logits those of the resident tape again."""

    def _next_logits(self) -> np.ndarray:
        """The next-token logits of the resident tape (n_vocab values), while _logits_ok."""

    def _open_sampler(self, config: DecodeConfig) -> Sampler: ...

    def _next_token(self, sampler: Any) -> int: ...


class InProcessDecode:
    """Decoding and scoring from the next-token logits the session holds."""

    def _first_score(self: _LogitsSession, token: int) -> float:
        # After a cut or an eviction the logits are recomputed (the last token evaluated
        # again) on the cache as it now is.
        if not self._logits_ok:
            self._refresh_logits()
        return float(token_logprobs(self._next_logits()[None, :], np.asarray([token]))[0])

    def decode(self: _LogitsSession, config: DecodeConfig) -> Generator[TokenChunk, None, None]:
        """Stream tokens; each is evaluated into the cache after it is handed out, but
        the reply's last one.

        That last token, and the last one a consumer that stops early received, stay
        pending: part of the tape, evaluated by the next prefill.
        """
        self._check_decode(config)
        tape = self._tape
        if not tape.resident and not tape.pending:
            raise EffctxError("nothing to decode from: the session holds no tokens")
        text = self._vocabulary.text_decoder()
        # Opened before anything is evaluated: a grammar llama.cpp refuses leaves the
        # session as it was.
        sampler = self._open_sampler(config)
        try:
            if tape.pending:
                self.prefill_suffix([])
            if not self._logits_ok:
                self._refresh_logits()
            for index in range(config.max_tokens):
                t0 = time.perf_counter_ns()
                token = self._next_token(sampler)
                logprob, top = (next_token_logprobs(self._next_logits(), token, config.logprobs)
                                if config.logprobs is not None else (None, ()))
                if self._vocabulary.is_eog(token):
                    yield TokenChunk(token, text.flush(), index, ms_since(t0), "eog", logprob, top)
                    return
                tape.pending = [token]
                stop = tape.stop_reason(index, config)
                piece = text.feed(token) + (text.flush() if stop else "")
                sample_ms = ms_since(t0)
                yield TokenChunk(token, piece, index, sample_ms, stop, logprob, top)
                if stop:
                    # The reply's last token stays pending, as llama-cpp-python's own
                    # completion leaves it: the next prefill evaluates it in its batch,
                    # where a decode step of its own now would cost a whole step.
                    tape.counters.count_decode_time(sample_ms)
                    return
                if len(tape.resident) >= tape.n_ctx:
                    if config.slide:
                        raise ContextOverflowError("decode", len(tape.resident), 1, tape.n_ctx)
                    return  # no slot left to evaluate it: it stays pending
                t1 = time.perf_counter_ns()
                self._eval([token], "decode", None)
                tape.pending = []
                tape.counters.count_decode_step(sample_ms + ms_since(t1))
        finally:
            sampler.free()
