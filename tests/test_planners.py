"""Residency planners: pure policy on block tables, exact expectations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from effctx_core.errors import EffctxError, UnsupportedFeatureError
from effctx_core.residency import BlockClass, BlockFlag, BlockTable, Reason, ResidencyReport, Segment
from effctx_core.residency.config import ResidencyConfig, check_residency
from effctx_core.residency.policies import (
    POLICIES,
    BudgetPlanner,
    NonePlanner,
    PlannerCaps,
    ScoredPlanner,
    StreamingPlanner,
    keeps_budget,
    planner_for,
)
from effctx_core.residency.tracker import ResidencyTracker

NO_SCORES = PlannerCaps(attention_scores=False)
SCORES = PlannerCaps(attention_scores=True)


def conversation(block_size: int = 16) -> BlockTable:
    # system 64 | document 256 | user 32 | assistant 64 | user 32 | assistant 64  = 512 tokens
    return BlockTable.from_segments(
        [(Segment.SYSTEM, 64), (Segment.DOCUMENT, 256), (Segment.USER, 32), (Segment.ASSISTANT, 64),
         (Segment.USER, 32), (Segment.ASSISTANT, 64)],
        block_size,
        turn_of_segment=[0, 0, 1, 1, 2, 2],
    )


def classes(table: BlockTable) -> str:
    return "".join("SRHCE"[c] for c in table.cls)


def test_blocks_never_span_two_segments():
    t = BlockTable.from_segments([(Segment.SYSTEM, 20), (Segment.USER, 20)], 16)
    assert list(zip(t.start, t.end)) == [(0, 16), (16, 20), (20, 36), (36, 40)]


def test_none_keeps_everything_and_reports_over_budget():
    plan = NonePlanner().plan(conversation(), 400, NO_SCORES)
    report = ResidencyReport.from_table(plan, "none", "observed", 400)
    assert classes(plan) == "H" * 32
    assert (report.hot_tokens, report.evicted_tokens, report.over_budget) == (512, 0, True)


@pytest.mark.parametrize("policy", ["none", "streaming"])
def test_below_the_budget_every_block_says_nothing_has_had_to_go(policy):
    tracker = ResidencyTracker(ResidencyConfig(policy=policy, sink_tokens=4, recent_tokens=60, block_size=16), 64,
                               NO_SCORES)
    tracker.append(Segment.USER, 20, turn=1)
    tracker.append(Segment.ASSISTANT, 30, turn=1)
    assert tracker.plan() is None
    assert {tracker.table().block(i).reason.text for i in range(len(tracker.table()))} == {
        "resident: the tape is within the budget, so no block has had to go"}


def test_streaming_keeps_sink_and_recent_and_evicts_the_middle():
    plan = StreamingPlanner(sink_tokens=16, recent_tokens=96).plan(conversation(), 112, NO_SCORES)
    assert classes(plan) == "S" + "E" * 25 + "R" * 6
    report = ResidencyReport.from_table(plan, "streaming", "observed", 112)
    assert (report.sink_tokens, report.recent_tokens, report.evicted_tokens) == (16, 96, 400)
    assert report.evicted_ranges == ((16, 416),)
    assert plan.block(5).reason is Reason.EVICTED_OUTSIDE_WINDOWS


def test_streaming_evicts_nothing_while_the_tape_fits_its_windows():
    t = BlockTable.from_segments([(Segment.OTHER, 100)], 4)
    plan = StreamingPlanner(sink_tokens=4, recent_tokens=96).plan(t, 100, NO_SCORES)
    assert BlockClass.EVICTED not in plan.cls


def test_pinned_blocks_survive_streaming():
    t = conversation()
    t.flags[(t.start < 110) & (t.end > 100)] |= np.uint8(BlockFlag.PINNED)
    plan = StreamingPlanner(16, 96).plan(t, 128, NO_SCORES)
    pinned = plan.block(t.block_at(100))
    assert (pinned.cls, pinned.reason) == (BlockClass.HOT, Reason.PINNED)


def test_budget_parks_assistant_turns_first_then_user_turns():
    plan = BudgetPlanner(sink_tokens=16, recent_tokens=32).plan(conversation(), 400, NO_SCORES)
    report = ResidencyReport.from_table(plan, "budget", "observed", 400)
    # 112 tokens must go: the older assistant turn (64), the newer one's first 32 tokens
    # (its last 32 are the recent window), then the first block of the older user turn.
    assert report.cold_ranges == ((320, 336), (352, 416), (448, 480))
    assert report.resident_tokens == 400 and not report.over_budget
    assert plan.block(plan.block_at(360)).reason is Reason.EVICTED_SEGMENT
    assert plan.block(plan.block_at(320)).reason is Reason.EVICTED_LRU


def test_budget_goes_least_recently_used_within_a_segment_kind():
    t = BlockTable.from_segments([(Segment.USER, 32)] * 4, 32, turn_of_segment=[3, 1, 0, 2])
    plan = BudgetPlanner(0, 0).plan(t, 64, NO_SCORES)
    assert classes(plan) == "HCCH"
    assert plan.block(1).reason is Reason.EVICTED_LRU


def test_budget_uses_attention_scores_when_the_backend_has_them():
    t = BlockTable.from_segments([(Segment.USER, 128)], 32)
    t.score[:] = [0.9, 0.1, 0.5, 0.7]
    plan = BudgetPlanner(0, 0).plan(t, 64, SCORES)
    assert classes(plan) == "HCCH"
    assert plan.block(1).reason is Reason.EVICTED_SCORE


def test_budget_never_brings_back_what_is_gone():
    t = conversation()
    t.cls[3] = BlockClass.EVICTED
    plan = BudgetPlanner(16, 32).plan(t, 1000, NO_SCORES)
    assert plan.cls[3] == BlockClass.EVICTED


def test_scored_is_refused_without_scores():
    with pytest.raises(UnsupportedFeatureError, match="needs attention scores"):
        planner_for(ResidencyConfig(policy="scored"), NO_SCORES)


def test_scored_keeps_the_heavy_hitters():
    t = BlockTable.from_segments([(Segment.DOCUMENT, 160)], 32)
    t.score[:] = [0.0, 0.2, 0.9, 0.8, 0.0]
    plan = ScoredPlanner(32, 32).plan(t, 96, SCORES)
    assert classes(plan) == "SEHER"


def test_the_profile_picks_the_planner():
    streaming = ResidencyConfig(policy="streaming", sink_tokens=4, recent_tokens=60, block_size=4)
    assert planner_for(streaming, NO_SCORES).name == "streaming"
    assert planner_for(ResidencyConfig(policy="budget"), NO_SCORES).name == "budget"
    assert planner_for(ResidencyConfig(policy="scored"), SCORES).name == "scored"


def test_each_policy_declares_its_parameters_needs_and_effects():
    assert list(POLICIES) == ["none", "streaming", "budget", "scored"]
    assert all(cls.name == name for name, cls in POLICIES.items())
    assert [n for n, c in POLICIES.items() if c.evicts] == ["streaming", "budget", "scored"]
    assert [n for n, c in POLICIES.items() if c.keeps_budget] == ["budget", "scored"]
    assert keeps_budget("budget") and not keeps_budget("streaming") and not keeps_budget("openvino-genai eviction")
    assert {n: dict(c.needs) for n, c in POLICIES.items() if c.needs} == {"scored": {"attention_scores": "attention scores"}}
    planner = planner_for(ResidencyConfig(policy="budget", sink_tokens=64, recent_tokens=128), NO_SCORES)
    assert (planner.sink_tokens, planner.recent_tokens) == (64, 128)
    with pytest.raises(EffctxError, match="not a multiple of block_size"):
        check_residency(ResidencyConfig(policy="streaming", sink_tokens=5, block_size=4), "here")
    check_residency(ResidencyConfig(policy="none", sink_tokens=5, block_size=4), "here")  # none takes no windows


@st.composite
def tapes(draw):
    segments = draw(st.lists(st.tuples(st.sampled_from(list(Segment)), st.integers(1, 200)), min_size=1, max_size=12))
    block = draw(st.sampled_from([4, 16, 32]))
    t = BlockTable.from_segments(segments, block, turn_of_segment=draw(st.permutations(range(len(segments)))))
    sink = draw(st.integers(0, 2)) * block
    recent = draw(st.integers(0, 4)) * block
    budget = draw(st.integers(0, t.n_tokens + 50))
    return t, sink, recent, budget


@settings(max_examples=300, deadline=None)
@given(tapes())
def test_budget_fits_the_budget_parks_no_more_than_it_must_and_keeps_the_windows(case):
    t, sink, recent, budget = case
    plan = BudgetPlanner(sink, recent).plan(t, budget, NO_SCORES)
    protected = int(plan.sizes[plan.cls <= BlockClass.RECENT].sum())
    resident = int(plan.sizes[plan.cls <= BlockClass.HOT].sum())
    assert np.all(plan.cls[plan.start < sink] == BlockClass.SINK)
    in_recent = (plan.start >= t.n_tokens - recent) & (plan.start >= sink)
    assert np.all(plan.cls[in_recent] == BlockClass.RECENT)
    assert int(plan.sizes[plan.cls == BlockClass.RECENT].sum()) <= recent
    if protected <= budget:
        assert resident <= budget
        cold = plan.sizes[plan.cls == BlockClass.COLD]
        if len(cold):
            # it parks no more than it must: without its last victim the rest would not fit
            assert resident + int(cold.max()) > budget
    else:
        assert resident == protected and BlockClass.HOT not in plan.cls
