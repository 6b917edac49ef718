"""SessionEngine.request on the tiny model: a client's whole prompt, started from the
cheapest thing the engine holds (the tape, a stored state, nothing)."""

from __future__ import annotations

import pytest

from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine
from effctx_core.engine.requests import RequestPrompt
from effctx_core.engine.router import RouteKind
from effctx_core.engine.turns import TurnExtras
from effctx_core.errors import ContextOverflowError
from effctx_core.profiles import Profile
from effctx_core.residency import Segment
from effctx_core.residency.tracker import SegmentRun
from effctx_core.snapshots import SnapshotStore
from tests.helpers.engines import opened_engine
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

pytestmark = pytest.mark.model

PROFILE = Profile(name="requests-test", n_ctx=1024)
REPLY = DecodeConfig(max_tokens=4)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture
def store(tmp_path):
    return SnapshotStore(tmp_path / "store")


def prompt(engine: SessionEngine, text: str, after: tuple[int, ...] = ()) -> RequestPrompt:
    tokens = list(after) + engine.session.tokenize(text, add_bos=not after)
    return RequestPrompt(tokens, [SegmentRun(Segment.USER, len(tokens), 0)], text)


def test_a_prompt_that_extends_the_tape_computes_only_what_is_new(tiny_model, store):
    with opened_engine(tiny_model, PROFILE, checkpoints=store) as engine:
        first = engine.request(prompt(engine, "The grass is green. " * 20), REPLY)
        second = engine.request(prompt(engine, " And the sky?", engine.tape), REPLY)
    assert (first.route.kind, first.cached) == (RouteKind.COLD, 0)
    assert second.route.kind is RouteKind.RESIDENT
    assert second.cached == first.prompt_tokens + first.turn.generated
    assert second.computed == second.prompt_tokens - second.cached


def test_two_alternating_conversations_each_restore_their_own_state(tiny_model, store):
    with opened_engine(tiny_model, PROFILE, checkpoints=store) as engine:
        a1 = engine.request(prompt(engine, "Apples are red and sweet. " * 12), REPLY)
        a_tape = engine.tape
        b1 = engine.request(prompt(engine, "Bridges span wide rivers. " * 12), REPLY)
        a2 = engine.request(prompt(engine, " More apples?", a_tape), REPLY)
    assert (b1.route.kind, b1.route.shared) == (RouteKind.RESIDENT, 1)  # only the BOS token in common
    assert (a2.route.kind, a2.route.node) == (RouteKind.RESTORED, a1.node)
    assert a2.cached == len(a_tape)


def test_a_new_engine_on_the_same_store_restores_a_conversation(tiny_model, store):
    with opened_engine(tiny_model, PROFILE, checkpoints=store) as engine:
        engine.request(prompt(engine, "Kept across a restart. " * 12), REPLY)
        tape = engine.tape
    with opened_engine(tiny_model, PROFILE, checkpoints=store) as engine:
        again = engine.request(prompt(engine, " Still here?", tape), REPLY)
    assert (again.route.kind, again.cached) == (RouteKind.RESTORED, len(tape))


def test_a_prompt_over_the_context_is_refused_before_the_session_changes(tiny_model, store):
    with opened_engine(tiny_model, PROFILE, checkpoints=store) as engine:
        engine.request(prompt(engine, "Short."), REPLY)
        tape = engine.tape
        with pytest.raises(ContextOverflowError):
            engine.request(prompt(engine, "word " * 1100), REPLY)
        assert engine.tape == tape


def test_a_reply_cancelled_mid_decode_leaves_the_engine_ready_for_the_next_request(tiny_model, store):
    with opened_engine(tiny_model, PROFILE, checkpoints=store) as engine:
        cut = engine.request(prompt(engine, "Cancel me."), DecodeConfig(max_tokens=200),
                             TurnExtras(on_token=lambda chunk: engine.cancel() if chunk.index == 2 else None))
        after = engine.request(prompt(engine, "Next one."), REPLY)
    assert (cut.turn.stop_reason, cut.turn.generated) == ("cancelled", 3)
    assert after.turn.stop_reason in ("max_tokens", "eog")
    assert after.route.kind in (RouteKind.RESIDENT, RouteKind.COLD)


def test_the_reply_node_records_the_route_and_what_the_caller_adds(tiny_model, store):
    with opened_engine(tiny_model, PROFILE, checkpoints=store) as engine:
        served = engine.request(prompt(engine, "Record me."), REPLY,
                                TurnExtras(label="client: record me", metrics=lambda r: {"reply": r.text}))
        node = engine.tree.node(served.node)
    assert node.label == "client: record me"
    assert node.metrics["route"] == "cold" and node.metrics["reply"] == served.turn.text
    assert node.blob is not None
