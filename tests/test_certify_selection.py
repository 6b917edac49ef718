"""Runtime selection by certificate (`--profile auto`) and the keep/drop verdicts, on
certificates that pass the schema."""

from __future__ import annotations

import pytest

from effctx_core.cells import Cell
from effctx_core.certify.certificate import example_document
from effctx_core.certify.matrix import CERTIFIED, FAILED, UNCERTIFIED, Matrix, MatrixRow
from effctx_core.certify.schema import check_document
from effctx_core.certify.selection import SelectionError, select_profile
from effctx_core.certify.verdict import Verdict, verdicts
from effctx_core.cli.bench import verdict_lines


def certificate(profile: str, wall_ms: float, ttft_ms: list[float], certified: int, decode_tps: float,
                workload: str = "agent-loop") -> dict:
    doc = example_document()
    doc["cell"]["profile"] = profile
    doc["context"]["certified"] = certified
    doc["throughput"]["engine"]["decode_tps"] = decode_tps
    doc["workloads"] = {workload: {**doc["workloads"]["chat-8"], "turns": len(ttft_ms), "ttft_ms": ttft_ms,
                                   "wall_ms": wall_ms}}
    check_document(doc)
    return doc


def row(profile: str, status: str = CERTIFIED, doc: dict | None = None, backend: str = "llama") -> MatrixRow:
    cell = Cell(backend, profile, "cpu", "model.gguf", True, "allocates 4096 tokens")
    return MatrixRow(cell, status, doc["reason"] if doc else "no certificate", doc)


EXACT = certificate("exact", 20_000, [1000, 500], 2048, 40.0)
FAST = certificate("fast-long", 15_000, [400, 200], 16_000, 41.0)
Q8 = certificate("q8", 19_000, [900, 450], 2048, 42.0)


def test_auto_picks_the_certified_cell_with_the_least_time_on_the_workload():
    matrix = Matrix((row("exact", doc=EXACT), row("fast-long", doc=FAST), row("q8", doc=Q8)), ())
    selection = select_profile(matrix)
    assert selection.profile == "fast-long"
    assert selection.reason == ("profile auto: fast-long (llama): the least time on agent-loop among 3 certified "
                                "cells (15.0 s over 2 turns, mean TTFT 300 ms), certified up to 16,000 tokens")


def test_auto_never_picks_a_failed_or_uncertified_cell_however_fast():
    failed = certificate("fast-long", 1, [1, 1], 16_000, 99.0)
    matrix = Matrix((row("exact", doc=EXACT), row("fast-long", FAILED, failed), row("q8", UNCERTIFIED)), ())
    assert select_profile(matrix).profile == "exact"


def test_auto_with_nothing_certified_is_one_line():
    with pytest.raises(SelectionError, match=r"^--profile auto: no cell is certified on this machine; "
                                             r"run `effctx certify --quick`$"):
        select_profile(Matrix((row("exact", UNCERTIFIED),), ()))


def test_auto_for_a_workload_no_certificate_measured_says_so():
    with pytest.raises(SelectionError, match="no certified cell has measured workload 'long-document'"):
        select_profile(Matrix((row("exact", doc=EXACT),), ()), "long-document")


def test_auto_for_a_workload_certification_never_measures_says_so():
    with pytest.raises(SelectionError, match=r"^--profile auto: no certified cell has measured workload 'mine', and "
                                             r"`effctx certify` measures only the built-in ones \(agent-loop, "):
        select_profile(Matrix((row("exact", doc=EXACT),), ()), "mine")


def test_a_cell_with_a_step_function_in_certified_context_and_ttft_is_kept_with_its_evidence():
    found = {v.profile: v for v in verdicts(Matrix((row("exact", doc=EXACT), row("fast-long", doc=FAST)), ()))}
    assert found["exact"].verdict == "baseline"
    fast = found["fast-long"]
    assert fast.verdict == "keep"
    assert fast.evidence[:5] == (
        "keep: a step function in TTFT, certified context",
        "TTFT 300 ms against 750 ms on agent-loop: 2.50x lower (keep at >= 2.0x)",
        "TTFT at length: a certificate without task families (certify with the full plan)",
        "certified context 16,000 against 2,048 tokens: 7.81x (keep at >= 1.5x)",
        "decode 41.0 tok/s against 40.0 tok/s: 1.02x (keep at >= 1.3x)",
    )


def test_a_cell_within_noise_of_the_baseline_is_dropped():
    found = {v.profile: v for v in verdicts(Matrix((row("exact", doc=EXACT), row("q8", doc=Q8)), ()))}
    assert found["q8"].verdict == "drop"
    assert found["q8"].evidence[0] == "drop: no step function over the baseline"


def test_ttft_is_compared_only_on_workloads_both_cells_ran_from_the_same_file():
    other = certificate("q8", 1_000, [10, 10], 2048, 40.0, workload="long-decode")
    found = {v.profile: v for v in verdicts(Matrix((row("exact", doc=EXACT), row("q8", doc=other)), ()))}
    assert found["q8"].evidence[1] == "TTFT: no workload with a measured TTFT on both cells"
    assert found["q8"].verdict == "drop"


def test_a_workload_without_a_measured_ttft_is_no_ttft_of_zero():
    # every turn of q8's run ended before its first token: no TTFT, not the fastest there is
    untimed = certificate("q8", 1_000, [], 2048, 40.0)
    found = {v.profile: v for v in verdicts(Matrix((row("exact", doc=EXACT), row("q8", doc=untimed)), ()))}
    assert found["q8"].evidence[1] == "TTFT: no workload with a measured TTFT on both cells"
    assert found["q8"].verdict == "drop"
    selection = select_profile(Matrix((row("q8", doc=untimed),), ()))
    assert selection.reason == ("profile auto: q8 (llama): the least time on agent-loop among 1 certified cell "
                                "(1.0 s over 0 turns, no TTFT measured), certified up to 2,048 tokens; "
                                "the only one measured")


def test_an_uncertified_cell_gets_no_verdict_and_says_why():
    found = {v.profile: v for v in verdicts(Matrix((row("exact", doc=EXACT), row("q8", UNCERTIFIED)), ()))}
    assert (found["q8"].verdict, found["q8"].evidence) == ("no verdict", ("uncertified: no certificate",))


def test_verdicts_need_a_certified_baseline():
    with pytest.raises(SelectionError, match=r"the baseline cell 'exact' is not certified on this machine"):
        verdicts(Matrix((row("exact", UNCERTIFIED), row("q8", doc=Q8)), ()))


def at_length(doc: dict, *rows: tuple[int, float, float]) -> dict:
    """The certificate with an effective context measured at (length, score, cold TTFT ms)."""
    by_length = [{"length": n, "score": score, "cold_ttft_ms": cold, "warm_ttft_ms": None} for n, score, cold in rows]
    doc = {**doc, "context": {**doc["context"], "effective": {
        "threshold": 0.8, "tokens": rows[-1][0], "ttft_budget_ms": 10_000.0, "cold": None, "warm": None,
        "by_length": by_length}}}
    check_document(doc)
    return doc


def test_a_cell_with_half_the_cold_ttft_at_16k_and_the_same_task_score_is_kept_for_it():
    base = at_length(EXACT, (8192, 0.9, 30_000.0), (16384, 0.85, 80_000.0))
    fast = at_length(Q8, (8192, 0.9, 14_000.0), (16384, 0.82, 38_000.0), (32768, 0.7, 90_000.0))
    found = {v.profile: v for v in verdicts(Matrix((row("exact", doc=base), row("q8", doc=fast)), ()))}
    assert found["q8"].verdict == "keep"
    assert found["q8"].evidence[:3] == (
        "keep: a step function in TTFT at length",
        "TTFT 675 ms against 750 ms on agent-loop: 1.11x lower (keep at >= 2.0x)",
        "cold TTFT at 16,384 tokens 38.0 s against 80.0 s: 2.11x lower, task score 0.82 against 0.85 "
        "(keep at >= 2.0x)")


def test_a_faster_cell_at_length_with_a_lower_task_score_is_not_kept_for_it():
    base = at_length(EXACT, (16384, 0.9, 80_000.0))
    fast = at_length(Q8, (16384, 0.5, 20_000.0))
    found = {v.profile: v for v in verdicts(Matrix((row("exact", doc=base), row("q8", doc=fast)), ()))}
    assert found["q8"].verdict == "drop"
    assert found["q8"].evidence[2] == ("TTFT at 16,384 tokens: task score 0.50 against 0.90, not the same quality")


def test_the_verdict_columns_fit_the_longest_names():
    found = [Verdict("exact", "llama", "baseline", ()),
             Verdict("llama-server", "llama-server", "drop", ("drop: no step function over the baseline",))]
    assert verdict_lines(found) == [
        "exact         llama         baseline",
        "llama-server  llama-server  drop",
        "    drop: no step function over the baseline",
    ]
