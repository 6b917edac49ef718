"""Snapshots: what a backend that claims state snapshots must do with them, and the
identity check that keeps states of other runtimes out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from effctx_core.contract import DecodeConfig, SessionSnapshot
from effctx_core.identity import IdentityMismatchError
from tests.helpers.contract import require, words

GREEDY = DecodeConfig(max_tokens=6)


def test_a_snapshot_restores_the_same_tape(fresh):
    require(fresh.info.capabilities.state_snapshot, "state_snapshot")
    tape = words(fresh, 30)
    fresh.ensure_prefix(tape)
    snap = fresh.snapshot()
    fresh.ensure_prefix(words(fresh, 12, seed=5))
    fresh.restore(snap)
    assert (list(fresh.tokens), fresh.explain().resident_tokens) == (tape, 30)
    assert snap.identity == fresh.info.identity and snap.n_tokens == 30


def test_an_exact_snapshot_continues_exactly_as_the_original(fresh):
    require(fresh.info.capabilities.exact_snapshot, "exact_snapshot")
    fresh.ensure_prefix(words(fresh, 30))
    snap = fresh.snapshot()
    first = [c.token for c in fresh.decode(GREEDY)]
    fresh.restore(snap)
    again = [c.token for c in fresh.decode(GREEDY)]
    assert len(first) == 6 and again == first


def test_a_snapshot_keeps_a_pending_token_pending_and_continues_as_the_original(fresh):
    require(fresh.info.capabilities.state_snapshot, "state_snapshot")
    fresh.ensure_prefix(words(fresh, 30))
    reply = fresh.decode(GREEDY)
    token = next(reply).token
    reply.close()  # the token handed out stays pending
    tape = list(fresh.tokens)
    snap = fresh.snapshot()
    assert (snap.pending, list(snap.tape), snap.n_tokens) == ((token,), tape, 30)
    first = [c.token for c in fresh.decode(GREEDY)]
    fresh.ensure_prefix(words(fresh, 12, seed=5))
    fresh.restore(snap)
    assert (list(fresh.tokens), fresh.explain().pending_tokens) == (tape, 1)
    again = [c.token for c in fresh.decode(GREEDY)]
    if fresh.info.capabilities.exact_snapshot.supported:
        assert again == first


def test_a_snapshot_of_another_identity_is_refused_before_the_backend_is_touched(fresh):
    require(fresh.info.capabilities.state_snapshot, "state_snapshot")
    tape = words(fresh, 20)
    fresh.ensure_prefix(tape)
    snap = fresh.snapshot()
    identity = fresh.info.identity
    foreign = replace(snap, identity=replace(identity, model_sha256="0" * 64))
    before = fresh.explain()
    with pytest.raises(IdentityMismatchError, match=r"model_sha256"):
        fresh.restore(foreign)
    assert list(fresh.tokens) == tape and fresh.explain() == before
    assert fresh.ensure_prefix(tape).reused == 20  # still usable, cache untouched


def test_a_restore_of_an_empty_snapshot_empties_the_session(fresh):
    require(fresh.info.capabilities.state_snapshot, "state_snapshot")
    fresh.ensure_prefix(words(fresh, 10))
    fresh.restore(SessionSnapshot(fresh.info.identity, (), b"", None))
    assert (list(fresh.tokens), fresh.explain().resident_tokens) == ([], 0)
