"""The engine's snapshot tree on the real default model: nodes per turn, exact restore,
recompute, branches."""

from __future__ import annotations

import pytest

from effctx_core.backends.profile_loader import load_profile
from effctx_core.contract import DecodeConfig
from effctx_core.snapshots import SnapshotStore
from tests.helpers.engines import opened_engine

PROFILE = load_profile("exact").with_changes(n_ctx=1024)
ONE = DecodeConfig(max_tokens=6)


@pytest.fixture
def engine(default_model, tmp_path):
    with opened_engine(default_model, PROFILE, checkpoints=SnapshotStore(tmp_path / "store")) as eng:
        yield eng


def test_every_turn_adds_a_node_whose_tape_is_the_session_tape(engine):
    engine.complete("The capital of France is", ONE)
    first = engine.tree.current
    engine.complete(" The capital of Italy is", ONE)
    second = engine.tree.current
    assert engine.tree.node(second).parent == first
    assert engine.tree.tape(second) == engine.tape
    assert engine.tree.node(second).blob is not None
    assert engine.tree.node(second).metrics["generated"] == 6


def test_restoring_a_node_is_exact_and_the_next_turn_branches_from_it(engine):
    engine.complete("The capital of France is", ONE)
    first = engine.tree.current
    original = engine.complete(" Then", DecodeConfig(max_tokens=8)).text
    engine.complete(" And more", ONE)
    restore = engine.restore_node(first)
    assert (restore.mode, restore.recomputed) == ("exact", 0)
    assert engine.tape == engine.tree.tape(first)
    again = engine.complete(" Then", DecodeConfig(max_tokens=8))
    assert again.text == original
    assert again.reused == len(engine.tree.tape(first))
    assert len(engine.tree.children(first)) == 1  # the same tape again: the same node
    engine.restore_node(first)
    engine.complete(" Now", ONE)
    assert len(engine.tree.children(first)) == 2


def test_a_node_without_state_is_recomputed_and_says_so(default_model):
    with opened_engine(default_model, PROFILE) as eng:  # no store: nodes carry no state
        eng.complete("The capital of France is", ONE)
        first = eng.tree.current
        eng.complete(" The capital of Italy is", ONE)
        restore = eng.restore_node(first)
        assert (restore.mode, restore.reason) == ("recompute", "the node has no saved state")
        assert restore.recomputed == 0  # its tokens were still resident: the cache was cut back
        assert eng.tape == eng.tree.tape(first)


def test_a_damaged_state_falls_back_to_recompute(engine, tmp_path):
    engine.complete("The capital of France is", ONE)
    first = engine.tree.current
    engine.reset()
    engine.complete("Once upon a time", ONE)
    blob = next((tmp_path / "store" / "blobs").glob(f"{engine.tree.node(first).blob}*"))
    raw = bytearray(blob.read_bytes())
    raw[-100] ^= 0xFF
    blob.write_bytes(bytes(raw))
    restore = engine.restore_node(first)
    assert restore.mode == "recompute" and "is corrupt" in restore.reason
    assert restore.recomputed == len(engine.tree.tape(first)) - 1  # all but the shared BOS
    assert engine.tape == engine.tree.tape(first)
