"""Residency policies carried out on the real llama.cpp backend (default model)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from effctx_core.backends.profile_loader import load_profile
from effctx_core.bench.prompts import filler_text
from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine
from effctx_core.errors import EffctxError, UnsupportedFeatureError
from effctx_core.residency import BlockClass
from effctx_core.residency.config import ResidencyConfig

STREAMING = load_profile("streaming").with_changes(
    n_ctx=512, residency=ResidencyConfig(policy="streaming", sink_tokens=4, recent_tokens=380, budget=384, block_size=4, slide_tokens=32)
)
BUDGET = load_profile("exact").with_changes(
    n_ctx=1024, residency=ResidencyConfig(policy="budget", sink_tokens=32, recent_tokens=128, budget=512, block_size=32)
)


@pytest.fixture
def open_engine(default_model):
    engines = []

    def open_(profile, events=None):
        engine = SessionEngine(default_model, profile)
        if events is not None:
            engine.subscribe(events.append)
        engine.open()
        engines.append(engine)
        return engine

    yield open_
    for engine in engines:
        engine.close()


def cache_matches_plan(engine) -> bool:
    return list(engine.session.tokens) == engine.residency.resident_tokens(list(engine.tape))


def test_a_prompt_longer_than_the_budget_streams_through(open_engine):
    events = []
    engine = open_engine(STREAMING, events)
    text = filler_text(lambda t, b: engine.session.tokenize(t, b), 1500)
    result = engine.complete(text, DecodeConfig(max_tokens=4))
    report = engine.residency_report()
    assert result.prefilled == len(engine.tape) - 4 > 1400
    assert report.source == "observed"
    assert report.sink_tokens == 4 and report.resident_tokens <= 384
    assert report.evicted_ranges == ((4, report.n_tokens - report.resident_tokens + 4),)
    assert result.evicted == report.evicted_tokens
    assert cache_matches_plan(engine)
    actions = [e for e in events if e.kind == "residency_action"]
    removals = [a for a in actions if a.action in ("evict", "slide")]
    shifts = [a for a in actions if a.action == "shift"]
    assert len(removals) == len(shifts) >= 3
    assert {a.stage for a in removals if a.action == "evict"} == {"prefill"}
    assert sum(a.end - a.start for a in removals) == report.evicted_tokens
    assert all(a.pos_start == 4 for a in removals)  # the middle goes, right after the sink


# STREAMING at half the size: a reply goes past its n_ctx in 300 tokens instead of 700.
SMALL_STREAMING = STREAMING.with_changes(n_ctx=256, residency=replace(STREAMING.residency, recent_tokens=188, budget=192))


def test_decoding_slides_the_window_past_n_ctx(open_engine):
    events = []
    engine = open_engine(SMALL_STREAMING, events)
    result = engine.complete("Once upon a time", DecodeConfig(max_tokens=300))
    assert result.generated == 300 and result.stop_reason == "max_tokens"
    assert len(engine.tape) > engine.info.n_ctx
    assert engine.explain().resident_tokens <= 192
    assert cache_matches_plan(engine)
    slides = [e for e in events if e.kind == "residency_action" and e.action == "slide"]
    assert slides and all(e.stage == "decode" for e in slides)


def test_a_second_turn_after_evictions_reuses_the_cache(open_engine):
    engine = open_engine(STREAMING)
    engine.complete(filler_text(lambda t, b: engine.session.tokenize(t, b), 600), DecodeConfig(max_tokens=2))
    context = engine.explain()
    resident = context.resident_tokens + context.pending_tokens  # the reply's last token is pending
    second = engine.complete(" The end.", DecodeConfig(max_tokens=2))
    assert (second.reused, second.dropped) == (resident, 0)
    assert cache_matches_plan(engine)


def test_the_budget_policy_parks_cold_and_recompute_brings_it_back(open_engine):
    engine = open_engine(BUDGET)
    engine.complete(filler_text(lambda t, b: engine.session.tokenize(t, b), 700), DecodeConfig(max_tokens=2))
    report = engine.residency_report()
    assert report.cold_tokens > 0 and report.evicted_tokens == 0
    assert report.resident_tokens <= 512 and cache_matches_plan(engine)
    engine.set_budget(1024)
    recomputed = engine.recompute_cold()
    after = engine.residency_report()
    assert recomputed == report.n_tokens - report.cold_ranges[0][0]
    assert after.cold_tokens == 0 and after.resident_tokens == after.n_tokens
    assert list(engine.session.tokens) == list(engine.tape)


def test_a_policy_that_shifts_is_refused_where_the_context_cannot_shift(default_model):
    profile = STREAMING.with_changes(swa_full=False, n_ctx=2048)
    engine = SessionEngine(default_model, profile)
    with pytest.raises(UnsupportedFeatureError, match="streaming policy removes middle ranges.*llama_memory_can_shift is false"):
        engine.open()


def test_the_scored_policy_is_refused_on_llama(default_model):
    profile = STREAMING.with_changes(residency=ResidencyConfig(policy="scored", sink_tokens=4, recent_tokens=380, budget=384, block_size=4))
    with pytest.raises(EffctxError, match="scored policy needs attention scores, and this backend does not supply them"):
        SessionEngine(default_model, profile).open()


def test_blocks_know_why_they_were_evicted(open_engine):
    engine = open_engine(STREAMING)
    engine.complete(filler_text(lambda t, b: engine.session.tokenize(t, b), 900), DecodeConfig(max_tokens=1))
    table = engine.residency.table()
    middle = table.block(table.block_at(200))
    assert middle.cls is BlockClass.EVICTED
    assert middle.reason.text == "outside the sink and recent windows of a streaming policy"
    assert table.block(0).cls is BlockClass.SINK


def test_restoring_a_node_under_an_evicting_policy_keeps_the_map_of_its_recompute(open_engine):
    engine = open_engine(STREAMING)
    engine.complete("The grass is green. " * 100, DecodeConfig(max_tokens=2))
    node = engine.tree.current
    engine.complete(" And the sky is blue.", DecodeConfig(max_tokens=2))
    restore = engine.restore_node(node)
    report = engine.residency_report()
    assert (restore.mode, restore.recomputed) == ("recompute", len(engine.tape))
    assert report.evicted_tokens > 0 and report.resident_tokens <= STREAMING.residency.budget
    assert report.resident_tokens == engine.explain().resident_tokens
    assert cache_matches_plan(engine)


def test_a_smaller_budget_parks_blocks_at_once_and_a_larger_one_lets_them_back(open_engine):
    engine = open_engine(BUDGET.with_changes(residency=ResidencyConfig(
        policy="budget", sink_tokens=32, recent_tokens=128, budget=1024, block_size=32)))
    engine.complete(filler_text(lambda t, b: engine.session.tokenize(t, b), 700), DecodeConfig(max_tokens=2))
    assert engine.residency_report().cold_tokens == 0
    engine.set_budget(384)
    shrunk = engine.residency_report()
    assert shrunk.budget == 384 and shrunk.cold_tokens > 0 and shrunk.resident_tokens <= 384
    assert cache_matches_plan(engine)
    engine.set_budget(1024)
    assert engine.recompute_cold() > 0
    grown = engine.residency_report()
    assert grown.cold_tokens == 0 and grown.resident_tokens == grown.n_tokens
    assert list(engine.session.tokens) == list(engine.tape)


def test_a_policy_without_a_budget_cannot_be_steered_by_one(open_engine):
    engine = open_engine(STREAMING)
    with pytest.raises(UnsupportedFeatureError, match="^the streaming policy does not keep to a token budget"):
        engine.set_budget(256)
