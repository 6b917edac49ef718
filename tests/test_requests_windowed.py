"""SessionEngine.request on the default model, whose sliding-window layers keep only their
window after a state load: a route claims only the tokens the request really keeps."""

from __future__ import annotations

import pytest

from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine
from effctx_core.engine.requests import RequestPrompt
from effctx_core.engine.router import RouteKind
from effctx_core.profiles import DEFAULT_PROFILE
from effctx_core.residency import Segment
from effctx_core.residency.tracker import SegmentRun
from effctx_core.snapshots import SnapshotStore
from tests.helpers.engines import opened_engine

pytestmark = pytest.mark.model

PROFILE = DEFAULT_PROFILE.with_changes(name="windowed-requests", n_ctx=3072)
REPLY = DecodeConfig(max_tokens=4)


@pytest.fixture
def store(tmp_path):
    return SnapshotStore(tmp_path / "store")


def words(engine: SessionEngine, text: str, n: int, first: bool) -> list[int]:
    tokens = engine.session.tokenize(text, add_bos=first)
    while len(tokens) < n:
        tokens += engine.session.tokenize(text, add_bos=False)
    return tokens[:n]


def prompt(tokens: list[int] | tuple[int, ...]) -> RequestPrompt:
    return RequestPrompt(list(tokens), [SegmentRun(Segment.USER, len(tokens), 0)], "")


def test_an_edit_of_the_last_message_cuts_the_cache_back_to_it(default_model, store):
    with opened_engine(default_model, PROFILE, checkpoints=store) as engine:
        first = engine.request(prompt(words(engine, " The grass is green.", 1100, True)), REPLY)
        asked = list(engine.tape)
        engine.request(prompt(asked + words(engine, " What colour is the sky?", 7, False)), REPLY)
        edited = engine.request(prompt(asked + words(engine, " What colour is the sun?", 7, False)), REPLY)
    shared = len(asked) + 4  # " What colour is the" is the same
    assert first.turn.generated == 4
    assert (edited.route.kind, edited.route.shared, edited.cached) == (RouteKind.RESIDENT, shared, shared)


def test_an_edit_below_the_rollback_floor_starts_from_the_state_the_session_kept_before_it(default_model, store):
    with opened_engine(default_model, PROFILE, checkpoints=store) as engine:
        engine.request(prompt(words(engine, " The grass is green.", 1100, True)), REPLY)
        asked = list(engine.tape)
        engine.request(prompt(asked + words(engine, " The sky is blue.", 600, False)), REPLY)
        # An edit inside the first prompt: the cache was cut to its windows at 1,615 tokens,
        # and keeps the states at the chunk starts of 512, 1,024 and 1,103 tokens below that.
        edited = engine.request(prompt(asked[:1050] + words(engine, " The sun is yellow.", 5, False)), REPLY)
    assert (edited.route.kind, edited.route.shared, edited.cached) == (RouteKind.RESIDENT, 1024, 1024)


def test_a_stored_state_is_not_restored_to_be_cut_back_where_a_load_keeps_only_the_window(
        default_model, store):
    with opened_engine(default_model, PROFILE, checkpoints=store) as engine:
        engine.request(prompt(words(engine, " The grass is green.", 1100, True)), REPLY)
        first = list(engine.tape)
        engine.request(prompt(words(engine, " Bridges span wide rivers.", 40, True)), REPLY)
        # The first conversation's reply sent back changed near its end.
        again = engine.request(prompt(first[:-2] + words(engine, " Indeed.", 3, False)), REPLY)
    assert (again.route.kind, again.route.shared, again.cached) == (RouteKind.RESIDENT, 1, 1)  # the BOS token
