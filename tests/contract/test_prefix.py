"""ensure_prefix keeps the longest common prefix, drops the rest, prefills the difference,
and says why with a structured cause."""

from __future__ import annotations

import pytest

from effctx_core.contract import DecodeConfig, PrefixCause, Session
from tests.helpers.contract import words


def test_an_empty_cache_prefills_the_whole_prefix(fresh):
    tape = words(fresh, 40)
    status = fresh.ensure_prefix(tape)
    assert (status.cause, status.reused, status.prefilled, status.dropped) == (PrefixCause.EMPTY, 0, 40, 0)
    assert (status.resident, status.available) == (40, fresh.info.n_ctx - 40)
    assert list(fresh.tokens) == tape


def test_the_same_prefix_again_reuses_every_token(fresh):
    tape = words(fresh, 40)
    fresh.ensure_prefix(tape)
    fresh.prefill_suffix(words(fresh, 10, seed=3))
    whole = list(fresh.tokens)
    status = fresh.ensure_prefix(whole)
    assert (status.cause, status.reused, status.prefilled, status.dropped) == (PrefixCause.IDENTICAL, 50, 0, 0)


def test_a_longer_prefix_extends_the_resident_tape(fresh):
    tape = words(fresh, 60)
    fresh.ensure_prefix(tape[:30])
    status = fresh.ensure_prefix(tape)
    assert (status.cause, status.reused, status.prefilled, status.dropped) == (PrefixCause.EXTENDS, 30, 30, 0)


def test_a_divergence_inside_the_tape_is_found_at_its_exact_index(fresh):
    tape = words(fresh, 60)
    fresh.ensure_prefix(tape)
    edited = tape[:37] + words(fresh, 10, seed=11)
    assert edited[37] != tape[37]
    status = fresh.ensure_prefix(edited)
    assert status.diverged_at == 37 and status.dropped == 60 - status.reused
    if status.cause is PrefixCause.ROLLBACK_LIMIT:
        assert status.reused == 0 and status.rollback_floor is not None and status.rollback_floor > 37
    else:
        assert (status.cause, status.reused, status.prefilled) == (PrefixCause.DIVERGED, 37, 10)
    assert list(fresh.tokens) == edited


def test_a_shorter_prefix_drops_the_tail(fresh):
    tape = words(fresh, 50)
    fresh.ensure_prefix(tape)
    status = fresh.ensure_prefix(tape[:20])
    assert status.diverged_at == 20 and list(fresh.tokens) == tape[:20]
    if status.cause is PrefixCause.ROLLBACK_LIMIT:  # a cache that cannot be cut there re-prefills
        assert (status.reused, status.prefilled, status.dropped) == (0, 20, 50)
    else:
        assert (status.cause, status.reused, status.dropped) == (PrefixCause.DIVERGED, 20, 30)
    assert fresh.explain().resident_tokens == 20


def _two_tokens_then_stop(session: Session) -> list[int]:
    """A reply read for two tokens and dropped: the second stays pending. The tape."""
    reply = session.decode(DecodeConfig(max_tokens=4))
    chunks = [next(reply), next(reply)]
    reply.close()
    if any(c.stop_reason == "eog" for c in chunks):
        pytest.skip("the model ended its reply before 2 tokens")
    return list(session.tokens)


def test_a_prefix_that_ends_on_a_pending_token_evaluates_nothing_and_keeps_it_pending(fresh):
    fresh.ensure_prefix(words(fresh, 20))
    tape = _two_tokens_then_stop(fresh)
    before = fresh.explain()
    status = fresh.ensure_prefix(tape)
    assert (status.cause, status.reused, status.prefilled, status.dropped, status.pending) == \
        (PrefixCause.IDENTICAL, 22, 0, 0, 1)
    after = fresh.explain()
    assert (after.prefill_calls, after.pending_tokens, list(fresh.tokens)) == (before.prefill_calls, 1, tape)


def test_the_next_prefill_evaluates_a_pending_token_with_its_suffix_in_one_call_as_a_decode_step(fresh):
    fresh.ensure_prefix(words(fresh, 20))
    tape = _two_tokens_then_stop(fresh)
    fresh.ensure_prefix(tape)
    before = fresh.explain()
    suffix = words(fresh, 5, seed=3)
    assert fresh.prefill_suffix(suffix).prefilled == 5
    after = fresh.explain()
    assert (after.prefill_calls - before.prefill_calls, after.prefill_tokens - before.prefill_tokens,
            after.decode_tokens - before.decode_tokens, after.pending_tokens) == (1, 5, 1, 0)
    assert list(fresh.tokens) == tape + suffix


def test_the_reason_is_the_sentence_of_the_cause(fresh):
    tape = words(fresh, 30)
    assert fresh.ensure_prefix(tape).reason == "empty cache"
    assert fresh.ensure_prefix(tape[:10] + words(fresh, 5, seed=2)).reason == \
        "diverges from the resident tape at token 10"


def test_a_second_engine_turn_reuses_the_whole_first_turn(cell):
    from effctx_core.contract import DecodeConfig
    from effctx_core.engine import SessionEngine

    engine = SessionEngine(cell.model_path, cell.profile())
    try:
        engine.open()
        engine.complete("The sky is blue and", DecodeConfig(max_tokens=4))
        before = len(engine.tape)
        second = engine.complete(" the grass is", DecodeConfig(max_tokens=4))
        assert (second.reused, second.dropped, second.prefix_cause) == (before, 0, PrefixCause.IDENTICAL.value)
    finally:
        engine.close()
