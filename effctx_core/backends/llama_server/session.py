"""A session on one llama-server slot. effctx keeps the token tape; every request sends
the whole of it as token ids with cache_prompt, and the server reuses the longest prefix
its slot holds, which it reports as timings.cache_n.

What the slot holds is modeled from the server's answers (`_held`), and reuse is reported
from the server's figure: where it differs from the tape, the server's number is the one
a PrefixStatus carries, and the ledger keeps both. Two rules of the server shape the
model: it evaluates at least one prompt token per request (a prompt the slot holds whole
has its last token evaluated again: a reply's request after a prefill costs one decode
step more than one request for both would), and the token it samples last is not
evaluated until the next request. That last decoded token is resident on the tape (as on
every backend) and evaluated by the next request: it counts as reused there, not as
prefilled.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterator, Sequence

import numpy as np

from effctx_core.backends.cache_session import CacheSession, TextDecoder
from effctx_core.backends.decode_loop import next_token_logprobs
from effctx_core.backends.gguf.runtime import LoadedModel
from effctx_core.backends.llama_server.client import Event, EventStream, ServerError, ServerRefusal
from effctx_core.backends.llama_server.connection import ServerConnection
from effctx_core.backends.llama_server.ledger import CacheLedger
from effctx_core.backends.llama_server.slots import Slot, SlotFileError, read_slot_file
from effctx_core.backends.tape import common_prefix_length
from effctx_core.contract import (
    DecodeConfig,
    ModelInfo,
    PrefillProgress,
    PrefixStatus,
    ProgressSink,
    RuntimeCounts,
    SessionSnapshot,
    TokenChunk,
)
from effctx_core.errors import ContextOverflowError, EffctxError, UnsupportedFeatureError
from effctx_core.units import ms_since

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

# Large enough that the biased token is always the one sampled; the reported
# log-probability comes from the logits before any bias.
_FORCE_BIAS = 1e9
# What the server writes for a probability of 0 (its float's lowest), instead of -inf.
_ZERO_PROBABILITY = -1e37

# A token's log-probability and its likeliest alternatives, as a TokenChunk carries them.
_Scores = tuple[float | None, tuple[tuple[int, float], ...]]
_NO_SCORES: _Scores = (None, ())


def _logprob(value: Any) -> float:
    number = float(value)
    return -math.inf if number <= _ZERO_PROBABILITY else number


@dataclass
class _Reply:
    """One reply in the making, over the requests it takes."""

    config: DecodeConfig
    n_emit: int
    prompt_tokens: int
    text: TextDecoder
    t_start: int
    index: int = 0  # tokens of the reply handed out (an end-of-generation one is not one)
    handed_out: int = 0  # every token handed out
    ended: bool = False
    # The server's own figures: the prompt it was given, the tokens it says it sampled
    # for what was handed out, its prompt time and time per token.
    input_tokens: int | None = None
    server_generated: int = 0
    server_ttft_ms: float | None = None
    tpot_ms: float = 0.0
    ttft_ms: float | None = None  # effctx's: request to first token

    def counts(self) -> RuntimeCounts:
        return RuntimeCounts(
            input_tokens=self.input_tokens if self.input_tokens is not None else 0,
            generated_tokens=self.server_generated,
            counted_input_tokens=self.prompt_tokens,
            counted_generated_tokens=self.handed_out,
            ttft_ms=self.server_ttft_ms if self.server_ttft_ms is not None else (self.ttft_ms or 0.0),
            tpot_ms=self.tpot_ms,
        )


class LlamaServerSession(CacheSession):
    def __init__(self, vocab: LoadedModel, connection: ServerConnection, profile: Profile, info: ModelInfo):
        super().__init__(vocab, info.n_ctx)
        self._connection = connection
        self._client = connection.client
        self._server_slot = connection.slot
        self._n_batch = profile.n_batch
        self._info = info
        self.identity = info.identity
        self._held: list[int] = []  # the tokens the slot holds, as the server's answers say
        self._server_reuse: int | None = None  # the first prefill request's reuse, for ensure_prefix
        self._last_request: RuntimeCounts | None = None
        self.ledger = CacheLedger()

    # ------------------------------------------------------------------ requests

    def _expected_reuse(self, prompt: Sequence[int]) -> int:
        """What the server should reuse of `prompt`, if the slot holds what the model says."""
        return min(common_prefix_length(self._held, prompt), len(prompt) - 1)

    def _deferred(self) -> int:
        """1 where the last resident token is the decoded one the slot has not evaluated
        yet (the next request evaluates it), else 0."""
        resident = self._tape.resident
        return int(len(resident) > 0 and common_prefix_length(self._held, resident) == len(resident) - 1)

    def _call(self, request: Callable[[], Any], stage: str, prompt_tokens: int) -> Any:
        """A request to the server: an overflow it reports leaves the session as it was;
        any other failure leaves the slot unknown, which poisons the session."""
        try:
            return request()
        except ServerRefusal as exc:
            if exc.kind == "exceed_context_size_error":
                resident = len(self._tape.resident)
                raise ContextOverflowError(stage, resident, max(prompt_tokens - resident, 0), self._tape.n_ctx) from None
            raise self._poison(str(exc)) from None
        except ServerError as exc:
            raise self._poison(str(exc)) from None

    def _account(self, what: str, prompt: list[int], expected: int, answer: dict[str, Any],
                 evaluated: list[int]) -> int:
        """Record a finished request's figures; `evaluated`: the tokens after the prompt the
        slot may hold (generated ones). The server's cache_n."""
        try:
            timings = answer["timings"]
            cache_n, prompt_n, cached = int(timings["cache_n"]), int(timings["prompt_n"]), int(answer["tokens_cached"])
        except (KeyError, TypeError, ValueError):
            raise self._poison(f"llama-server answered {what} without its timings") from None
        self.ledger.record(what, len(prompt), expected, cache_n, prompt_n)
        self._held = (prompt + evaluated)[:cached]
        return cache_n

    def _complete(self, prompt: list[int], n_predict: int, stage: str, what: str,
                  extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """One /completion, not streamed, greedy."""
        body = {"prompt": prompt, "n_predict": n_predict, "cache_prompt": True, "id_slot": self._server_slot.index,
                "return_tokens": True, "temperature": 0.0, "samplers": ["temperature"], **(extra or {})}
        expected = self._expected_reuse(prompt)
        answer: dict[str, Any] = self._call(lambda: self._client.post("/completion", body, what), stage, len(prompt))
        tokens = answer.get("tokens")
        self._account(what, prompt, expected, answer, [int(t) for t in tokens] if isinstance(tokens, list) else [])
        return answer

    # ------------------------------------------------------------------ the cache

    def _evaluate(self, prompt: list[int], stage: str, what: str) -> dict[str, Any] | None:
        """Evaluate `prompt` into the slot: /completion with n_predict 0 (the server samples
        a token, which is discarded). No request where the slot holds all of it already:
        the server would evaluate its last token again, and the cache would hold other
        numbers for it than a prefill in n_batch chunks leaves."""
        if common_prefix_length(self._held, prompt) >= len(prompt):
            return None
        return self._complete(prompt, 0, stage, what)

    def _append(self, tokens: Sequence[int], stage: str, progress: ProgressSink | None) -> float:
        """n_batch chunks, one request each: the cache holds the numbers a llama session's
        chunked prefill leaves, whatever the calls' sizes (n_batch is in the identity)."""
        total = len(tokens)
        elapsed = 0.0
        for off in range(0, total, self._n_batch):
            chunk = [int(t) for t in tokens[off : off + self._n_batch]]
            before = len(self._tape.resident) - self._deferred()  # what the slot holds of the tape
            t0 = time.perf_counter_ns()
            answer = self._evaluate(self._tape.resident + chunk, stage, f"a {stage} chunk")
            ms = ms_since(t0)
            if off == 0 and answer is not None:
                cache_n = int(answer["timings"]["cache_n"])
                # The decoded token the slot had not evaluated was counted when it was
                # decoded: it is reused here, where the server kept everything before it.
                self._server_reuse = cache_n + (len(self._tape.resident) - before if cache_n >= before else 0)
            self._tape.resident.extend(chunk)
            elapsed += ms
            if progress is not None:
                progress(PrefillProgress(stage, off + len(chunk), total, len(chunk), ms))
        return elapsed

    def _truncate(self, keep: int) -> None:
        if keep == 0:
            # Emptied for real: the next request then reuses nothing it should not.
            self._call(self._server_slot.erase, "prefix", 0)
            self._held = []
        # Otherwise the slot keeps its tokens: the next request diverges where the tape
        # was cut, and the server cuts there itself.
        del self._tape.resident[keep:]

    def ensure_prefix(self, prefix: Sequence[int], progress: ProgressSink | None = None) -> PrefixStatus:
        self._server_reuse = None
        status = super().ensure_prefix(prefix, progress)
        reused = self._server_reuse
        if reused is None or reused == status.reused:
            return status
        # The server reused another number of tokens than the tape says (it lost some, or
        # still held some the tape had dropped): its figure is the one reported.
        shift = reused - status.reused
        self._tape.counters.correct_reuse(shift)
        return replace(status, reused=reused, prefilled=status.prefilled - shift)

    # ------------------------------------------------------------------ decoding

    def _decode_body(self, prompt: list[int], n_predict: int, config: DecodeConfig, done: int) -> dict[str, Any]:
        """The sampler chain effctx's own sampler builds: greedy, or top-p then temperature
        then a seeded draw; every other sampler of the server's chain is left out."""
        body: dict[str, Any] = {"prompt": prompt, "n_predict": n_predict, "cache_prompt": True,
                                "id_slot": self._server_slot.index, "return_tokens": True}
        if config.logprobs is not None:
            # From the raw logits, as effctx's own decode loop computes them; the server
            # reports nothing at all with n_probs 0, so k = 0 asks for one and drops it.
            body.update(n_probs=max(config.logprobs, 1), post_sampling_probs=False)
        if config.greedy:
            return {**body, "temperature": 0.0, "samplers": ["temperature"]}
        body.update(temperature=config.temperature, top_p=config.top_p, min_keep=1, samplers=["top_p", "temperature"])
        if config.seed is not None:
            # A reply that takes several requests seeds each apart: the same seed again
            # would repeat the first request's draws.
            body["seed"] = (config.seed + done) % 2**32
        return body

    def decode(self, config: DecodeConfig) -> Generator[TokenChunk, None, None]:
        """Stream a reply from /completion's event stream, each token as it arrives.

        The server holds back a token whose text ends inside a UTF-8 character and sends
        its text with the next token's, without its id. Then the stream is dropped, the
        held token is asked for alone (not streamed: the answer carries its id), and a new
        stream goes on after it. Closing the generator early drops the stream and leaves
        the last token handed out pending."""
        self._check_decode(config)
        tape = self._tape
        if not tape.resident and not tape.pending:
            raise EffctxError("nothing to decode from: the session holds no tokens")
        whole = len(tape.resident) + len(tape.pending)
        if whole > tape.n_ctx:
            raise ContextOverflowError("decode", len(tape.resident), len(tape.pending), tape.n_ctx)
        room = tape.n_ctx - whole
        reply = _Reply(config, min(config.max_tokens, max(room + len(tape.pending), 1)), whole,
                       self._vocabulary.text_decoder(), time.perf_counter_ns())
        try:
            while reply.index < reply.n_emit and not reply.ended:
                before = reply.handed_out
                held_back = yield from self._stream(reply)
                if held_back and not reply.ended:
                    yield from self._held_token(reply)
                elif reply.handed_out == before:
                    return  # the server ended the reply by itself
        finally:
            self._last_request = reply.counts()

    def _stream(self, reply: _Reply) -> Generator[TokenChunk, None, bool]:
        """One streamed request for the rest of the reply; True where the server held a
        token back (the stream is dropped there)."""
        prompt = self._tape.resident + self._tape.pending
        body = self._decode_body(prompt, reply.n_emit - reply.index, reply.config, reply.index)
        expected = self._expected_reuse(prompt)
        taken: list[int] = []
        server_count = 0
        finished = False
        stream = self._call(lambda: self._client.stream("/completion", body, "a streamed reply"), "decode", len(prompt))
        try:
            with stream:
                events = self._events(stream)
                t_event = time.perf_counter_ns()

                def drain() -> None:
                    # The server sends its last event right after a reply's last token.
                    nonlocal finished
                    for event in events:
                        if event.final:
                            self._finish(event, prompt, expected, taken, reply)
                            finished = True
                            return

                for event in events:
                    data = event.data
                    if reply.input_tokens is None:
                        reply.input_tokens = int(data.get("tokens_evaluated", 0))
                    n_decoded = int(data.get("tokens_predicted", 0))
                    if event.final:
                        self._finish(event, prompt, expected, taken, reply)
                        finished = True
                        return n_decoded > len(taken)
                    ids = [int(t) for t in data.get("tokens") or []]
                    if n_decoded > len(taken) + len(ids):
                        return True
                    probs = data.get("completion_probabilities")
                    for j, token in enumerate(ids):
                        taken.append(token)
                        server_count = n_decoded
                        scores = self._streamed_scores(probs, j, token, reply.config)
                        yield from self._hand_out(token, ms_since(t_event), reply, drain, scores)
                        if reply.ended:
                            return False
                        t_event = time.perf_counter_ns()
        finally:
            reply.server_generated += server_count
            if not finished and taken:
                # Dropped before its last event: the server evaluated the prompt and every
                # token it sampled another after; it may have gone on before it noticed.
                self._held = prompt + taken[:-1]
        raise self._poison("llama-server's event stream ended before its last event")

    def _events(self, stream: EventStream) -> Iterator[Event]:
        try:
            yield from stream
        except ServerError as exc:
            raise self._poison(str(exc)) from None

    def _finish(self, event: Event, prompt: list[int], expected: int, taken: list[int], reply: _Reply) -> None:
        """A streamed request's last event: the server's figures for it."""
        timings = event.data.get("timings") or {}
        if reply.server_ttft_ms is None:
            reply.server_ttft_ms = float(timings.get("prompt_ms", 0.0))
            reply.tpot_ms = float(timings.get("predicted_per_token_ms", 0.0))
        self._account("a streamed reply", prompt, expected, event.data, taken)

    def _held_token(self, reply: _Reply) -> Generator[TokenChunk, None, None]:
        """The token the stream held back, asked for alone: a non-streamed answer carries
        its id whatever its text (greedy, it is the same token)."""
        t0 = time.perf_counter_ns()
        prompt = self._tape.resident + self._tape.pending
        answer = self._complete(prompt, 1, "decode", "a held-back token",
                                self._decode_body(prompt, 1, reply.config, reply.index))
        tokens = answer.get("tokens")
        if not isinstance(tokens, list) or len(tokens) != 1:
            raise self._poison("llama-server answered a one-token request without its token")
        reply.server_generated += int(answer.get("tokens_predicted", 0))
        token = int(tokens[0])
        k = reply.config.logprobs
        # The server reports no probabilities for a token whose text ends inside a UTF-8
        # character: they are read from every token's, asked for at the same position.
        scores = (next_token_logprobs(self._distribution(prompt, "decode", "a held-back token's probabilities"),
                                      token, k) if k is not None else _NO_SCORES)
        yield from self._hand_out(token, ms_since(t0), reply, lambda: None, scores)

    def _streamed_scores(self, probs: Any, j: int, token: int, config: DecodeConfig) -> _Scores:
        """The scores of the j-th token of a streamed event, as the server reported them
        (its top alternatives ordered likeliest first, ties by id, as effctx's own)."""
        if config.logprobs is None:
            return _NO_SCORES
        try:
            entry = probs[j]
            if int(entry["id"]) != token:
                raise ValueError
            top = sorted(((int(e["id"]), _logprob(e["logprob"])) for e in entry["top_logprobs"]),
                         key=lambda pair: (-pair[1], pair[0]))
            return _logprob(entry["logprob"]), tuple(top[: config.logprobs])
        except (IndexError, KeyError, TypeError, ValueError):
            raise self._poison(f"llama-server streamed token {token} without its probabilities") from None

    def _hand_out(self, token: int, ms: float, reply: _Reply, drain: Callable[[], None], scores: _Scores
                  ) -> Generator[TokenChunk, None, None]:
        """One token of the reply onto the tape and out; `reply.ended` where it ends the reply."""
        if reply.ttft_ms is None:
            reply.ttft_ms = ms_since(reply.t_start)
        reply.handed_out += 1
        tape = self._tape
        if tape.pending:
            # The server evaluated the token before this one to sample this one.
            tape.settle_pending()
        index = reply.index
        if self._vocabulary.is_eog(token):
            reply.ended = True
            drain()  # before the chunk: a caller stops reading at an end-of-generation token
            yield TokenChunk(token, reply.text.flush(), index, ms, "eog", *scores)
            return
        tape.pending = [token]
        resident = len(tape.resident)
        stop = tape.stop_reason(index, reply.config)
        piece = reply.text.feed(token) + (reply.text.flush() if stop else "")
        tape.counters.count_decode_time(ms)
        reply.index += 1
        reply.ended = stop is not None
        yield TokenChunk(token, piece, index, ms, stop, *scores)
        if stop:
            if resident < tape.n_ctx:
                # Resident as on every backend; the slot evaluates it with the next request.
                tape.settle_pending()
            drain()

    def _runtime_counts(self) -> RuntimeCounts | None:
        return self._last_request

    # ------------------------------------------------------------------ token scores

    def _forced_logprob(self, context: list[int], token: int, stage: str) -> float:
        """log p(token | context), from a one-token request whose logit bias makes the
        server sample `token` and report its probability from the unbiased logits. For a
        token it reports no probabilities of (see _distribution), from every token's."""
        answer = self._complete(context, 1, stage, "a scored token",
                                {"n_probs": 1, "post_sampling_probs": False, "logit_bias": [[token, _FORCE_BIAS]]})
        probs = answer.get("completion_probabilities")
        if probs is None:
            return float(self._distribution(context, stage, "a scored byte token")[token])
        try:
            entry = probs[0]
            if int(entry["id"]) != token:
                raise ValueError
            return _logprob(entry["logprob"])
        except (IndexError, KeyError, TypeError, ValueError):
            raise self._poison(f"llama-server did not report the probability of token {token}") from None

    def _distribution(self, context: list[int], stage: str, what: str) -> np.ndarray:
        """log p(every token | context), n_vocab values (float64).

        The server drops the probabilities of a sampled token whose text ends inside a
        UTF-8 character (a byte token such as <0xC3>), so a token whose text is whole is
        made the sampled one by a logit bias, with every token's probability (n_probs =
        the vocabulary, a few MB of JSON for a large one) from the unbiased logits."""
        vocab = self._info.facts.vocab_size
        anchor = self._vocabulary.tokenize("a", add_bos=False)[0]
        answer = self._complete(context, 1, stage, what, {
            "n_probs": vocab, "post_sampling_probs": False, "logit_bias": [[anchor, _FORCE_BIAS]]})
        out = np.full(vocab, np.nan)
        try:
            for entry in answer["completion_probabilities"][0]["top_logprobs"]:
                out[int(entry["id"])] = _logprob(entry["logprob"])
        except (IndexError, KeyError, TypeError, ValueError):
            raise self._poison(f"llama-server did not report every token's probability for {what}") from None
        if np.isnan(out).any():
            raise self._poison(f"llama-server reported {vocab - int(np.isnan(out).sum())} of the {vocab} token "
                               f"probabilities for {what}")
        return out

    def _rebuild(self, chunk: list[int], stage: str) -> None:
        """Evaluate `chunk` after the resident tape again as a plain prefill does, in one
        batch: the scoring requests evaluated it a token at a time, which gives the cache
        other numbers. The slot is cut back first by a prompt that diverges there."""
        other = 0 if chunk[0] != 0 else 1
        self._complete(self._tape.resident + [other], 0, stage, "a cut before a re-evaluated chunk")
        self._complete(self._tape.resident + chunk, 0, stage, "a re-evaluated chunk")

    def _first_score(self, token: int) -> float:
        return self._forced_logprob(list(self._tape.resident), int(token), "prefill")

    def _append_scored(self, tokens: Sequence[int], stage: str, progress: ProgressSink | None) -> tuple[float, np.ndarray]:
        """_append with a score per token after the first: in each n_batch chunk every token
        is scored by its own request, then the chunk is evaluated again in one batch, so
        the cache ends as _append leaves it."""
        tokens = [int(t) for t in tokens]
        scores = np.empty(len(tokens) - 1, dtype=np.float64)
        elapsed = 0.0
        for off in range(0, len(tokens), self._n_batch):
            chunk = tokens[off : off + self._n_batch]
            t0 = time.perf_counter_ns()
            for j in range(1 if off == 0 else 0, len(chunk)):
                scores[off + j - 1] = self._forced_logprob(self._tape.resident + chunk[:j], chunk[j], stage)
            self._rebuild(chunk, stage)
            ms = ms_since(t0)
            self._tape.resident.extend(chunk)
            elapsed += ms
            if progress is not None:
                progress(PrefillProgress(stage, off + len(chunk), len(tokens), len(chunk), ms))
        return elapsed, scores

    # ------------------------------------------------------------------ snapshots

    def _snapshot_slot(self) -> Slot:
        slot = self._server_slot
        if slot.folder is None:
            raise UnsupportedFeatureError(self._info.capabilities.state_snapshot.reason)
        return slot

    def snapshot(self) -> SessionSnapshot:
        self._check_usable()
        slot = self._snapshot_slot()
        if not self._tape.resident:
            return SessionSnapshot(self.identity, (), b"", None)
        data: bytes = self._call(slot.save, "snapshot", 0)
        read_slot_file(data)  # the server's own file: refused now rather than at a restore
        return SessionSnapshot(self.identity, tuple(self._tape.resident), data, None, tuple(self._tape.pending))

    def restore(self, snapshot: SessionSnapshot) -> None:
        self._check_restorable(snapshot)
        slot = self._snapshot_slot()
        if not snapshot.tokens:
            self._call(slot.erase, "restore", 0)
            self._tape.reset()
            self._held = []
            return
        # Checked before the server sees it: a restore it refuses empties the slot.
        saved = read_slot_file(snapshot.state).tokens
        if common_prefix_length(saved, snapshot.tokens) < min(len(saved), len(snapshot.tokens)):
            raise SlotFileError("the slot file holds other tokens than the snapshot's tape")
        try:
            restored = slot.restore(snapshot.state)
        except ServerRefusal as exc:
            # The server empties the slot when it refuses a file: the tape goes back into
            # it, and the session is as it was.
            self._held = []
            self._evaluate(self._tape.resident, "restore", "the tape again, after a refused restore")
            raise SlotFileError(f"{exc}; the session's tape was evaluated into the slot again") from None
        except ServerError as exc:
            raise self._poison(str(exc)) from None
        if restored != len(saved):
            raise self._poison(f"llama-server restored {restored} of the slot file's {len(saved)} tokens")
        self._tape.reset(snapshot.tokens, snapshot.pending)
        self._held = list(saved)

    def _release(self) -> None:
        self._connection.close()
