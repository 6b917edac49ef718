"""Decoding and the engine's bookkeeping: stop reasons, token accounting that agrees
with the backend's own counts, and a cancel between two prefill chunks."""

from __future__ import annotations

import pytest

from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine
from tests.helpers.contract import N_BATCH, words


@pytest.fixture(scope="module")
def engine(cell):
    opened = SessionEngine(cell.model_path, cell.profile())
    opened.open()
    yield opened
    opened.close()


@pytest.fixture
def clean(engine):
    engine.reset()
    return engine


def test_decode_hands_out_max_tokens_and_says_so_on_the_last(fresh):
    fresh.ensure_prefix(words(fresh, 20))
    chunks = list(fresh.decode(DecodeConfig(max_tokens=5)))
    if chunks[-1].stop_reason == "eog":
        pytest.skip("the model ended its reply before 5 tokens")
    assert [c.index for c in chunks] == [0, 1, 2, 3, 4]
    assert [c.stop_reason for c in chunks] == [None, None, None, None, "max_tokens"]
    # Every handed-out token is on the tape; the last is in the cache only where the
    # runtime evaluated it, otherwise pending for the next prefill's batch.
    context = fresh.explain()
    assert (len(fresh.tokens), context.resident_tokens + context.pending_tokens) == (25, 25)
    assert context.pending_tokens <= 1


def test_a_full_context_stops_the_reply_with_n_ctx(fresh):
    n_ctx = fresh.info.n_ctx
    fresh.ensure_prefix(words(fresh, n_ctx - 3))
    chunks = list(fresh.decode(DecodeConfig(max_tokens=10)))
    if chunks[-1].stop_reason == "eog":
        pytest.skip("the model ended its reply before the context filled")
    assert chunks[-1].stop_reason == "n_ctx" and len(chunks) <= 3


def test_a_stop_string_ends_the_turn_with_stop(clean):
    probe = clean.complete("The sky is", DecodeConfig(max_tokens=6))
    if probe.stop_reason == "eog" or len(probe.text.strip()) < 2:
        pytest.skip("the model wrote too little to stop inside it")
    clean.reset()
    stop = probe.text.strip()[:2]
    result = clean.complete("The sky is", DecodeConfig(max_tokens=6, stop=(stop,)))
    assert result.stop_reason == "stop" and result.text == probe.text[:probe.text.index(stop)]


def test_the_engine_counts_what_the_backend_did(clean):
    before = clean.explain()
    first = clean.complete("Once upon a time", DecodeConfig(max_tokens=5))
    second = clean.complete(" and then", DecodeConfig(max_tokens=3))
    after = clean.explain()
    assert after.prefill_tokens - before.prefill_tokens == first.prefilled + second.prefilled
    # Every generated token is a decode step, the first reply's last one too (evaluated
    # in the second turn's batch, where the runtime left it pending), or still pending.
    assert after.decode_tokens - before.decode_tokens + after.pending_tokens == first.generated + second.generated
    # A new conversation keeps what it shares with the one before (the BOS, where there is one).
    assert len(clean.tape) == first.reused + first.prefilled + first.generated + second.prefilled + second.generated


def test_a_runtime_that_counts_its_requests_counts_what_the_engine_counted(clean):
    result = clean.complete("Once upon a time", DecodeConfig(max_tokens=5))
    counts = clean.explain().runtime_counts
    if counts is None:
        pytest.skip("the runtime reports no per-request counts")
    assert (counts.generated_tokens, counts.counted_generated_tokens) == (result.generated, result.generated)
    assert counts.input_tokens == counts.counted_input_tokens == len(clean.tape) - result.generated


def test_a_cancel_stops_the_prefill_between_two_chunks(clean):
    unsubscribe = clean.subscribe(lambda e: clean.cancel() if e.kind == "prefill_chunk" else None)
    try:
        result = clean.complete("word " * (3 * N_BATCH), DecodeConfig(max_tokens=4))
    finally:
        unsubscribe()
    assert (result.stop_reason, result.prefilled, result.generated) == ("cancelled", N_BATCH, 0)
    # What the turn kept from the conversation before it (a BOS) stays in the cache too.
    assert clean.tape == () and clean.explain().resident_tokens == N_BATCH + result.reused
    after = clean.complete("Hello", DecodeConfig(max_tokens=1))
    assert (after.reused, after.dropped) == (0, N_BATCH + result.reused)
