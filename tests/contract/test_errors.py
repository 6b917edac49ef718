"""Typed errors: an overflow says its numbers and leaves the session usable; a poisoned
session refuses work until it is reopened; a file that is not a model is one line."""

from __future__ import annotations

import pytest

from effctx_core.contract import DecodeConfig, SessionSnapshot
from effctx_core.errors import ContextOverflowError, EffctxError, ModelFileError, SessionFatalError
from tests.helpers.contract import require, words


def test_a_suffix_past_n_ctx_is_an_overflow_with_its_numbers_and_changes_nothing(fresh):
    n_ctx = fresh.info.n_ctx
    fresh.ensure_prefix(words(fresh, 100))
    with pytest.raises(ContextOverflowError) as caught:
        fresh.prefill_suffix(words(fresh, n_ctx, seed=1))
    error = caught.value
    assert (error.stage, error.resident, error.additional, error.n_ctx) == ("prefill", 100, n_ctx, n_ctx)
    assert fresh.explain().resident_tokens == 100
    assert fresh.prefill_suffix(words(fresh, 10, seed=2)).resident == 110


def test_a_prefix_past_n_ctx_is_an_overflow(fresh):
    n_ctx = fresh.info.n_ctx
    with pytest.raises(ContextOverflowError) as caught:
        fresh.ensure_prefix(words(fresh, n_ctx + 1))
    assert (caught.value.stage, caught.value.additional, caught.value.n_ctx) == ("prefix", n_ctx + 1, n_ctx)


def test_the_engine_refuses_a_turn_that_cannot_fit_before_it_starts(cell):
    from effctx_core.engine import SessionEngine

    engine = SessionEngine(cell.model_path, cell.profile())
    try:
        engine.open()
        with pytest.raises(ContextOverflowError):
            engine.complete("word " * 2000, DecodeConfig(max_tokens=1))
        assert engine.tape == ()
        assert engine.complete("Hello", DecodeConfig(max_tokens=1)).generated == 1
    finally:
        engine.close()


def test_a_damaged_state_is_refused_whole_or_poisons_the_session_until_it_is_reopened(cell):
    """A backend that can check a state before it touches the cache refuses it and stays as
    it was; one that finds out only while loading it is poisoned and refuses all work."""
    session = cell.open()
    try:
        require(session.info.capabilities.state_snapshot, "state_snapshot")
        tape = words(session, 8)
        session.ensure_prefix(tape)
        damaged = SessionSnapshot(session.info.identity, (1, 2, 3), b"not a state", None)
        with pytest.raises(EffctxError):
            session.restore(damaged)
        if not session.explain().poisoned:
            assert list(session.tokens) == tape and session.ensure_prefix(tape).reused == 8
            return
        for work in (lambda: session.ensure_prefix([1]), lambda: session.prefill_suffix([1]),
                     lambda: list(session.decode(DecodeConfig(max_tokens=1))), session.snapshot):
            with pytest.raises(SessionFatalError, match="reopen"):
                work()
    finally:
        session.close()
    reopened = cell.open()
    try:
        assert reopened.ensure_prefix(words(reopened, 5)).prefilled == 5
    finally:
        reopened.close()


@pytest.mark.parametrize("content, what", [
    (b"", "empty"), (b"hello, this is text\n", "text"), (b"GGUF", "cut short"),
])
def test_a_file_that_is_not_a_model_is_refused_in_one_line(cell, tmp_path, content, what):
    bad = tmp_path / f"{what}.model"
    bad.write_bytes(content)
    with pytest.raises(ModelFileError) as caught:
        cell.backend.check_model(bad)
        cell.backend.open(bad, cell.profile())
    assert "\n" not in str(caught.value) and str(bad) in str(caught.value)


def test_a_missing_model_is_refused_in_one_line(cell, tmp_path):
    with pytest.raises(ModelFileError, match="not found|no such|missing|does not exist"):
        cell.backend.check_model(tmp_path / "absent.gguf")
