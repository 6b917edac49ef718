"""A cell's effective context from its task families (RULER's rule), and the longest
effective length within a TTFT budget, cold and warm."""

from __future__ import annotations

from effctx_core.certify.effective import effective_context, effective_sentence
from tests.helpers.task_rows import grid, row


def test_the_effective_length_is_the_longest_whose_mean_score_and_every_shorter_ones_hold():
    tasks = {"passkey": grid(row(1024, 1.0), row(2048, 1.0), row(4096, 1.0), row(8192, 1.0)),
             "multikey": grid(row(1024, 0.75), row(2048, 0.75), row(4096, 0.5), row(8192, 1.0))}
    effective = effective_context(tasks, 0.8, 10_000)
    assert [r["score"] for r in effective["by_length"]] == [0.875, 0.875, 0.75, 1.0]
    assert effective["tokens"] == 2048  # 8192 holds again, but 4096 broke the run


def test_a_length_some_family_did_not_reach_is_not_averaged():
    tasks = {"passkey": grid(row(1024, 1.0), row(2048, 1.0)), "multikey": grid(row(1024, 1.0))}
    assert [r["length"] for r in effective_context(tasks, 0.8, 10_000)["by_length"]] == [1024]


def test_the_budget_cuts_the_effective_length_by_the_median_cold_and_warm_ttft():
    tasks = {"passkey": grid(row(1024, 1.0, 2000, 90), row(2048, 1.0, 9000, 95), row(4096, 1.0, 21000, 99)),
             "multikey": grid(row(1024, 1.0, 3000, 110), row(2048, 1.0, 11000, 105), row(4096, 1.0, 23000, 120))}
    effective = effective_context(tasks, 0.8, 10_000)
    assert [(r["cold_ttft_ms"], r["warm_ttft_ms"]) for r in effective["by_length"]] == [
        (2500.0, 100.0), (10000.0, 100.0), (22000.0, 109.5)]
    assert (effective["tokens"], effective["cold"], effective["warm"]) == (4096, 2048, 4096)
    assert effective_sentence(effective) == "effective context 4,096; at TTFT ≤ 10 s: 2,048 (cold), 4,096 (warm)"


def test_without_state_snapshots_there_is_no_warm_figure():
    effective = effective_context({"passkey": grid(row(1024, 1.0, 500, None))}, 0.8, 10_000)
    assert (effective["cold"], effective["warm"]) == (1024, None)
    assert effective_sentence(effective) == "effective context 1,024; at TTFT ≤ 10 s: 1,024 (cold), none (warm)"


def test_a_cell_below_the_threshold_at_its_shortest_length_has_no_effective_context():
    effective = effective_context({"passkey": grid(row(1024, 0.5), row(2048, 1.0))}, 0.8, 10_000)
    assert (effective["tokens"], effective["cold"], effective["warm"]) == (None, None, None)
    assert effective_sentence(effective) == ("no effective context (mean task score below 80% at the shortest "
                                             "length)")
