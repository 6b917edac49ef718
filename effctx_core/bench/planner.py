"""`effctx bench planner`: how long each residency policy takes to plan a long tape."""

from __future__ import annotations

import statistics
import time

import numpy as np

from effctx_core.residency import BlockTable, Segment
from effctx_core.residency.policies import (
    BudgetPlanner,
    NonePlanner,
    Planner,
    PlannerCaps,
    ScoredPlanner,
    StreamingPlanner,
)
from effctx_core.units import ms_since


def conversation_tape(n_tokens: int, block_size: int, seed: int = 0) -> BlockTable:
    """A long conversation: a system prompt, then alternating user/assistant/tool turns
    of mixed lengths, with attention scores for the policies that use them."""
    rng = np.random.default_rng(seed)
    kinds = [Segment.USER, Segment.ASSISTANT, Segment.TOOL, Segment.DOCUMENT]
    segments, done = [(Segment.SYSTEM, 2000)], 2000
    while done < n_tokens:
        n = min(int(rng.integers(200, 8000)), n_tokens - done)
        segments.append((kinds[len(segments) % len(kinds)], n))
        done += n
    table = BlockTable.from_segments(segments, block_size, turn_of_segment=list(range(len(segments))))
    table.score[:] = rng.random(len(table), dtype=np.float32)
    return table


def run_planner_benchmark(n_tokens: int, block_size: int, repeats: int = 30) -> list[dict]:
    table = conversation_tape(n_tokens, block_size)
    budget = n_tokens // 10
    sink, recent = block_size, 64 * block_size
    cases: list[tuple[str, Planner, PlannerCaps]] = [
        ("none", NonePlanner(), PlannerCaps()),
        ("streaming", StreamingPlanner(sink, recent), PlannerCaps()),
        ("budget", BudgetPlanner(sink, recent), PlannerCaps()),
        ("budget+scores", BudgetPlanner(sink, recent), PlannerCaps(attention_scores=True)),
        ("scored", ScoredPlanner(sink, recent), PlannerCaps(attention_scores=True)),
    ]
    rows = []
    for name, planner, caps in cases:
        planner.plan(table, budget, caps)  # warm caches
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            planner.plan(table, budget, caps)
            times.append(ms_since(t0))
        times.sort()
        rows.append({
            "policy": name,
            "tokens": n_tokens,
            "blocks": len(table),
            "median_ms": round(statistics.median(times), 3),
            "p95_ms": round(times[int(0.95 * (len(times) - 1))], 3),
        })
    return rows
