"""The tape's segment map (which tokens are the user's, the assistant's, a document's)
survives every operation that moves the tape: swaps, restores, reopening a session. The
real default model."""

from __future__ import annotations

import pytest

from effctx_core.backends.profile_loader import load_profile
from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine
from effctx_core.residency import Segment
from effctx_core.residency.tracker import SegmentRun, segments_from_json, segments_to_json
from effctx_core.snapshots import SnapshotStore
from tests.helpers.engines import opened_engine

PROFILE = load_profile("exact").with_changes(n_ctx=1024)
FEW = DecodeConfig(max_tokens=6)


@pytest.fixture
def engine(default_model, tmp_path):
    with opened_engine(default_model, PROFILE, checkpoints=SnapshotStore(tmp_path / "store")) as eng:
        yield eng


def _two_turns(engine: SessionEngine) -> list[SegmentRun]:
    engine.chat("The capital of France is", FEW)
    engine.chat("And of Italy?", FEW)
    runs = engine.residency.segments_from()
    assert [(r.kind, r.turn) for r in runs] == [
        (Segment.USER, 1), (Segment.ASSISTANT, 1), (Segment.USER, 2), (Segment.ASSISTANT, 2),
    ]
    return runs


def test_a_swap_that_carries_the_state_over_keeps_the_segments(engine):
    runs = _two_turns(engine)
    assert engine.swap(PROFILE.with_changes(n_ctx=2048)).mode == "exact"
    assert engine.residency.segments_from() == runs


def test_a_swap_that_recomputes_keeps_the_segments(engine):
    runs = _two_turns(engine)
    assert engine.swap(load_profile("q8").with_changes(n_ctx=1024)).mode == "recompute"
    assert engine.residency.segments_from() == runs


def _restore_keeps_the_first_nodes_segments(engine: SessionEngine, mode: str) -> None:
    engine.chat("The capital of France is", FEW)
    first = engine.tree.current
    at_first = engine.residency.segments_from()
    engine.chat("And of Italy?", FEW)
    assert engine.restore_node(first).mode == mode
    assert engine.residency.segments_from() == at_first


def test_an_exact_restore_brings_back_the_nodes_segments(engine):
    _restore_keeps_the_first_nodes_segments(engine, "exact")


def test_a_recomputed_restore_brings_back_the_nodes_segments(default_model):
    with opened_engine(default_model, PROFILE) as eng:  # no store: every restore recomputes
        _restore_keeps_the_first_nodes_segments(eng, "recompute")


def test_a_reopened_session_has_its_segments(engine, default_model, tmp_path):
    runs = _two_turns(engine)
    engine.save_session("segments")
    reopened = SessionEngine(default_model, PROFILE, checkpoints=SnapshotStore(tmp_path / "store"))
    reopened.open()
    try:
        reopened.load_session("segments")
        assert reopened.residency.segments_from() == runs
    finally:
        reopened.close()


def test_a_segment_map_round_trips_through_a_nodes_json():
    runs = [SegmentRun(Segment.DOCUMENT, 40, 0), SegmentRun(Segment.USER, 7, 1), SegmentRun(Segment.ASSISTANT, 5, 1)]
    assert segments_to_json(runs) == [["document", 40, 0], ["user", 7, 1], ["assistant", 5, 1]]
    assert segments_from_json(segments_to_json(runs), 52) == runs


@pytest.mark.parametrize("raw", [None, [["user", 7, 1]], [["speaker", 52, 0]], [["user", -1, 0], ["user", 53, 0]]],
                         ids=["none kept", "short of the tape", "unknown kind", "negative run"])
def test_a_node_without_a_usable_segment_map_is_one_other_run(raw):
    assert segments_from_json(raw, 52) == [SegmentRun(Segment.OTHER, 52, 0)]
