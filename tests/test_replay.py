"""Replaying a recorded trace without a model rebuilds what the console shows."""

from __future__ import annotations

import json

import pytest

from effctx_core.backends.profile_loader import load_profile
from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine
from effctx_core.events.reader import read_trace
from effctx_core.events.replay import ReplayEngine, ReplayError
from effctx_core.residency.config import ResidencyConfig
from effctx_core.snapshots.conversations import conversations
from tests.helpers.api_traffic import record_traffic
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

STREAMING = load_profile("streaming").with_changes(
    n_ctx=512, residency=ResidencyConfig(policy="streaming", sink_tokens=4, recent_tokens=380, budget=384, block_size=4)
)


def record(default_model, tmp_path, profile, turns):
    path = tmp_path / "rec.jsonl"
    engine = SessionEngine(default_model, profile, trace_path=path)
    engine.open()
    for text, n in turns:
        engine.chat(text, DecodeConfig(max_tokens=n))
    live = (engine.tape, engine.residency_report(), engine.residency.table())
    engine.close()
    return read_trace(path), live


def play(trace) -> ReplayEngine:
    replay = ReplayEngine(trace)
    for event in trace.events:
        replay.apply(event)
    return replay


def test_a_chat_replays_to_the_same_tape_and_residency(default_model, tmp_path):
    trace, (tape, report, _) = record(default_model, tmp_path, load_profile("exact").with_changes(n_ctx=1024),
                                      [("What is the capital of France?", 12), ("And of Italy?", 8)])
    replay = play(trace)
    assert len(replay.tape) == len(tape)
    decoded = [t for t in replay.tape if t >= 0]
    assert replay.detokenize(decoded) and all(t in tape for t in decoded)
    assert replay.residency_report().n_tokens == report.n_tokens


def test_a_streaming_session_replays_its_evictions(default_model, tmp_path):
    trace, (tape, report, _) = record(default_model, tmp_path, STREAMING, [("The grass is green. " * 100, 4)])
    replay = play(trace)
    got = replay.residency_report()
    assert got.evicted_ranges == report.evicted_ranges and got.evicted_tokens == report.evicted_tokens > 0
    assert got.source == "observed"


def test_a_streaming_session_replays_its_plan_block_for_block(default_model, tmp_path):
    trace, (_, report, table) = record(default_model, tmp_path, STREAMING, [("The grass is green. " * 100, 40)])
    replay = play(trace)
    got = replay.residency.table()
    assert replay.residency_report() == report
    assert report.policy == "streaming" and report.sink_tokens == 4 and report.recent_tokens > 0
    assert got.cls.tolist() == table.cls.tolist() and got.reason.tolist() == table.reason.tolist()


def test_the_replay_runs_under_the_recorded_residency_settings(default_model, tmp_path):
    trace, _ = record(default_model, tmp_path, STREAMING, [("Hello", 2)])
    assert play(trace).profile.residency == STREAMING.residency


def test_a_replay_cannot_be_continued(default_model, tmp_path):
    trace, _ = record(default_model, tmp_path, load_profile("exact").with_changes(n_ctx=1024), [("Hello", 2)])
    with pytest.raises(ReplayError, match="can be watched, not continued"):
        play(trace).chat("more")


def test_the_replay_rebuilds_the_snapshot_tree(default_model, tmp_path):
    trace, _ = record(default_model, tmp_path, load_profile("exact").with_changes(n_ctx=1024),
                      [("Hello", 2), ("And more", 2)])
    tree = play(trace).tree
    nodes = list(tree)
    assert [n.label for n in nodes] == ["start", "Hello", "And more"]
    assert nodes[2].parent == nodes[1].id


def test_a_swap_and_a_restore_replay_to_the_live_tape_lengths(default_model, tmp_path):
    path = tmp_path / "rec.jsonl"
    engine = SessionEngine(default_model, load_profile("exact").with_changes(n_ctx=1024), trace_path=path)
    engine.open()
    engine.chat("What is the capital of France?", DecodeConfig(max_tokens=6))
    first = engine.tree.current
    engine.chat("And of Italy?", DecodeConfig(max_tokens=6))
    engine.swap(load_profile("q8").with_changes(n_ctx=1024))  # another identity: recomputed
    after_swap = len(engine.tape)
    engine.restore_node(first)
    after_restore = len(engine.tape)
    engine.close()
    trace = read_trace(path)
    replay = ReplayEngine(trace)
    seen = {}
    for event in trace.events:
        replay.apply(event)
        if event.kind in ("swap", "node_restore"):
            seen[event.kind] = (len(replay.tape), replay.residency_report().n_tokens)
    assert seen == {"swap": (after_swap, after_swap), "node_restore": (after_restore, after_restore)}
    assert replay.tree.node(replay.tree.current).label == "What is the capital of France?"


def strip_fields(trace_path, kind, names):
    """The trace as an older effctx wrote it: `kind` events without the fields `names`."""
    lines = []
    for line in trace_path.read_text().splitlines():
        event = json.loads(line)
        if event["kind"] == kind:
            event = {k: v for k, v in event.items() if k not in names}
        lines.append(json.dumps(event))
    trace_path.write_text("\n".join(lines) + "\n")
    return read_trace(trace_path)


RECORDED_RESIDENCY = ("policy", "block_size", "budget", "sink_tokens", "recent_tokens", "slide_tokens",
                      "residency_source", "residency_reason")


def test_a_replay_of_a_modeled_cell_shows_the_map_modeled_with_the_backends_reason(tmp_path):
    tiny = write_tiny_llama_gguf(tmp_path / "tiny.gguf", n_ctx_train=8192)
    profile = load_profile("ov-prefix-cache")
    path = tmp_path / "rec.jsonl"
    engine = SessionEngine(tiny, profile, trace_path=path)
    engine.open()
    engine.complete("Hello there", DecodeConfig(max_tokens=2))
    live = engine.residency_report()
    engine.close()
    trace = read_trace(path)
    opened = trace.events[0]
    assert (opened.residency_source, opened.residency_reason) == (
        "modeled", "openvino-genai's scheduler owns the paged cache and reports its usage, not which blocks it kept")
    assert live.source == play(trace).residency_report().source == "modeled"


def test_a_trace_that_did_not_record_the_map_source_replays_it_as_unknown(default_model, tmp_path):
    record(default_model, tmp_path, STREAMING, [("Hello", 2)])
    old = strip_fields(tmp_path / "rec.jsonl", "session_opened", ("residency_source", "residency_reason"))
    replay = play(old)
    assert replay.residency_report().source == "unknown"
    assert replay.profile.residency == STREAMING.residency  # the policy was recorded: it is still shown


def record_swap(default_model, tmp_path):
    """A chat on `exact`, swapped to the streaming cell: the live report after the swap."""
    path = tmp_path / "rec.jsonl"
    engine = SessionEngine(default_model, load_profile("exact").with_changes(n_ctx=512), trace_path=path)
    engine.open()
    engine.chat("What is the capital of France?", DecodeConfig(max_tokens=6))
    engine.swap(STREAMING)
    live = engine.residency_report()
    engine.close()
    return path, live


def test_a_swap_replays_onto_the_new_cells_residency_policy_and_windows(default_model, tmp_path):
    path, live = record_swap(default_model, tmp_path)
    replay = play(read_trace(path))
    assert replay.profile.residency == STREAMING.residency
    assert replay.residency.config.block_size == 4
    assert replay.residency_report() == live
    assert (live.policy, live.source) == ("streaming", "observed")


def test_a_swap_that_did_not_record_the_new_cells_residency_replays_it_as_unknown(default_model, tmp_path):
    path, live = record_swap(default_model, tmp_path)
    old = strip_fields(path, "swap", RECORDED_RESIDENCY)
    report = play(old).residency_report()
    assert (report.policy, report.source, report.n_tokens) == ("unknown", "unknown", live.n_tokens)


@pytest.fixture(scope="module")
def api_traffic(tmp_path_factory):
    """The trace of a real endpoint's traffic (api_traffic.send_traffic): five requests of
    one conversation, then one of a second."""
    return record_traffic(tmp_path_factory.mktemp("api-traffic"))


@pytest.mark.model
def test_a_replay_of_endpoint_traffic_groups_its_requests_by_conversation(api_traffic):
    tree = play(read_trace(api_traffic)).tree
    assert [(c.id, c.nodes) for c in conversations(tree)] == [("c1", ("n1", "n2", "n3", "n4", "n5")),
                                                              ("c2", ("n6",))]


@pytest.mark.model
def test_a_replay_names_the_nodes_as_the_live_tree_did(api_traffic):
    tree = play(read_trace(api_traffic)).tree
    assert [n.label for n in tree] == [
        "start", "c1 · user: Plan a trip to Rome", "c1 · user: And Paris?", "c1 · user: And Rome again?",
        "c1 · user: Which day is it?", "c1 · user: Weather there?", "c2 · user: Fix the loop"]


@pytest.mark.model
def test_an_older_trace_replays_its_nodes_named_by_their_input_and_without_conversations(api_traffic, tmp_path):
    """A trace written before the node events recorded their conversation and label."""
    path = tmp_path / "old.jsonl"
    path.write_text(api_traffic.read_text())
    tree = play(strip_fields(path, "node", ("conversation", "label"))).tree
    assert [n.label for n in tree] == ["start", "Plan a trip to Rome", "And Paris?", "And Rome again?",
                                       "Which day is it?", "Weather there?", "Fix the loop"]
    assert conversations(tree) == []
