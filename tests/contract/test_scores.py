"""Teacher-forced token scores (score_suffix): a prefill that also says how likely the model
found each token it evaluated. Where the capability report claims token_scores, the scores
agree with what the session decodes, do not depend on how the text is split into calls or
chunks, and the prefill counts and continues exactly as prefill_suffix's; where it does not,
the call is refused with the report's reason and changes nothing."""

from __future__ import annotations

import math
import re
from typing import Iterator

import numpy as np
import pytest

from effctx_core.contract import DecodeConfig, PrefillProgress, Session
from effctx_core.errors import UnsupportedFeatureError
from tests.helpers.contract import require, words

GREEDY = DecodeConfig(max_tokens=4)


class _Stop(Exception):
    pass


@pytest.fixture
def scoring(fresh: Session) -> Session:
    require(fresh.info.capabilities.token_scores, "token_scores")
    return fresh


@pytest.fixture(scope="module")
def small_batch(cell, session) -> Iterator[Session]:
    """A session of 8-token chunks, so a few tokens span several chunks."""
    require(session.info.capabilities.token_scores, "token_scores")
    opened = cell.open(n_batch=8)
    yield opened
    opened.close()


def test_scores_are_one_finite_log_probability_per_token_and_nan_for_the_first_on_an_empty_tape(scoring):
    text = words(scoring, 10)
    scored = scoring.score_suffix(text)
    assert scored.logprobs.dtype == np.float64 and scored.logprobs.shape == (10,)
    assert math.isnan(scored.logprobs[0])
    assert np.isfinite(scored.logprobs[1:]).all() and (scored.logprobs[1:] <= 0.0).all()
    status = scored.status
    assert (status.suffix_tokens, status.prefilled, status.resident) == (10, 10, 10)
    assert list(scoring.tokens) == text


def test_the_greedy_token_is_scored_as_the_likeliest(scoring):
    prompt = words(scoring, 8)
    scoring.score_suffix(prompt)
    greedy = [c.token for c in scoring.decode(DecodeConfig(max_tokens=1))][0]
    others = [u for u in words(scoring, 3, seed=5) if u != greedy]

    def last_score(token: int) -> float:
        scoring.ensure_prefix([])
        return float(scoring.score_suffix(prompt + [token]).logprobs[-1])

    picked = last_score(greedy)
    # The argmax of a distribution over the vocabulary has at least 1 / n_vocab of it.
    assert picked >= -math.log(scoring.info.facts.vocab_size)
    assert all(picked > last_score(u) for u in others)


def test_a_text_scored_in_two_calls_scores_as_in_one(small_batch):
    small_batch.ensure_prefix([])
    text = words(small_batch, 16)
    whole = small_batch.score_suffix(text).logprobs
    small_batch.ensure_prefix([])
    # Split on a chunk boundary: both ways evaluate the same two 8-token batches. llama.cpp
    # gives a position other logits in another batch (measured: up to 1.03 in a
    # log-probability, 4-token against 8-token batches of the default model).
    head = small_batch.score_suffix(text[:8]).logprobs
    tail = small_batch.score_suffix(text[8:]).logprobs
    assert not math.isnan(tail[0])  # conditioned on the tape the first call left
    np.testing.assert_allclose(np.concatenate([head, tail])[1:], whole[1:], rtol=0, atol=1e-3)


def test_a_scored_prefill_reports_each_chunk_and_a_stop_keeps_the_chunks_done(small_batch):
    small_batch.ensure_prefix([])
    text = words(small_batch, 20)
    seen: list[PrefillProgress] = []
    small_batch.score_suffix(text, seen.append)
    assert [(p.stage, p.done, p.total, p.chunk_tokens) for p in seen] == [
        ("prefill", 8, 20, 8), ("prefill", 16, 20, 8), ("prefill", 20, 20, 4)]

    small_batch.ensure_prefix([])
    before = small_batch.explain()

    def stop_after_first(p: PrefillProgress) -> None:
        raise _Stop

    with pytest.raises(_Stop):
        small_batch.score_suffix(text, stop_after_first)
    assert list(small_batch.tokens) == text[:8] and small_batch.explain().resident_tokens == 8
    assert small_batch.explain().prefill_tokens == before.prefill_tokens  # a stopped call is not counted
    assert small_batch.score_suffix(text[8:]).status.resident == 20  # still usable, and goes on from there


def test_a_scored_prefill_counts_and_continues_as_a_prefill(scoring):
    prompt = words(scoring, 16)
    before = scoring.explain()
    scoring.score_suffix(prompt)
    after = scoring.explain()
    assert (after.prefill_calls - before.prefill_calls, after.prefill_tokens - before.prefill_tokens) == (1, 16)
    assert after.resident_tokens == 16
    scored_reply = [c.token for c in scoring.decode(GREEDY)]
    scoring.ensure_prefix([])
    scoring.prefill_suffix(prompt)
    assert [c.token for c in scoring.decode(GREEDY)] == scored_reply


def test_a_pending_token_is_evaluated_first_and_only_the_suffix_is_scored(scoring):
    prompt, suffix = words(scoring, 8), words(scoring, 5, seed=3)
    scoring.prefill_suffix(prompt)
    reply = scoring.decode(DecodeConfig(max_tokens=4))
    pending = next(reply).token
    reply.close()  # the token handed out stays pending
    decoded = scoring.explain().decode_tokens
    scored = scoring.score_suffix(suffix)
    # The pending token is evaluated in the same batch, counted as its reply's decode step.
    assert (scored.status.suffix_tokens, scored.status.prefilled, scored.logprobs.shape) == (5, 5, (5,))
    assert scoring.explain().decode_tokens == decoded + 1
    assert list(scoring.tokens) == prompt + [pending] + suffix
    # The same batches without a pending token: the prompt prefilled, then the pending
    # token and the suffix scored in one call, the pending token's score dropped.
    scoring.ensure_prefix([])
    scoring.prefill_suffix(prompt)
    given = scoring.score_suffix([pending] + suffix).logprobs
    np.testing.assert_allclose(scored.logprobs, given[1:], rtol=0, atol=1e-3)


def test_a_session_without_token_scores_refuses_with_the_reason_and_stays_usable(fresh):
    claim = fresh.info.capabilities.token_scores
    if claim.supported:
        pytest.skip("claims token_scores: exercised by the tests above")
    tape = words(fresh, 6)
    fresh.ensure_prefix(tape)
    before = fresh.explain()
    with pytest.raises(UnsupportedFeatureError, match=f"^no token scores here: {re.escape(claim.reason)}$"):
        fresh.score_suffix(words(fresh, 4, seed=2))
    assert list(fresh.tokens) == tape and fresh.explain() == before
    assert fresh.prefill_suffix(words(fresh, 4, seed=2)).resident == 10
