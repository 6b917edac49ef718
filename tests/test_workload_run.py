"""`bench run`: a workload through the engine beside the library's own control, on the
real default model (llama.cpp, and openvino-genai's paged pipeline), and on the tiny model
where only the accounting matters."""

from __future__ import annotations

from dataclasses import replace

import pytest

from effctx_core.backends.profile_loader import load_profile
from effctx_core.bench.workload_run import run_workload
from effctx_core.bench.workloads import load_workload
from tests.helpers.small_workload import write_small_workload
from tests.helpers.tiny_gguf import write_tiny_llama_gguf


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return load_workload(str(write_small_workload(tmp_path_factory.mktemp("workload"))))


@pytest.fixture(scope="module")
def report(default_model, small):
    return run_workload(default_model, load_profile("exact"), small)


def by_kind(report, kind):
    return [t for t in report.turns if t.kind == kind]


def test_every_kind_of_turn_runs_in_order(report):
    assert [(t.label, t.kind) for t in report.turns] == [
        ("turn 1", "cold"), ("turn 2", "suffix"), ("turn 3 (prefix edited)", "edit"), ("read-first 1", "branch"),
        ("turn 1, new process", "second-process")]


def test_every_turn_runs_beside_the_library_control_on_the_same_prompt(report):
    assert report.control_name == "Llama.create_completion (llama-cpp-python)"
    assert all(t.control is not None and t.control.ttft_ms > 0 and t.control.wall_ms >= t.control.ttft_ms
               for t in report.turns)


def test_reported_tokens_add_up_to_every_prompt(report):
    assert report.accounting_agrees, report.accounting
    assert all(t.reused + t.computed == t.prompt_tokens for t in report.turns)


def test_the_cold_turn_computes_its_whole_prompt(report):
    (cold,) = by_kind(report, "cold")
    assert (cold.reused, cold.computed) == (0, cold.prompt_tokens)
    assert cold.how.startswith("prefix cache miss: ")


def test_a_later_turn_reuses_the_conversation_and_computes_only_its_message(report):
    cold, suffix = report.turns[0], report.turns[1]
    assert suffix.reused >= cold.prompt_tokens
    assert suffix.computed < 40


def test_an_edit_of_the_prefix_keeps_only_what_precedes_the_changed_word(report, small):
    (edit,) = by_kind(report, "edit")
    prefix_tokens = report.turns[0].prompt_tokens - 20  # the first message is under 20 tokens
    assert 0 < edit.reused < prefix_tokens
    assert edit.computed > edit.prompt_tokens // 2


def test_a_branch_restores_the_snapshot_of_its_turn_and_computes_only_its_message(report):
    (branch,) = by_kind(report, "branch")
    assert branch.how.startswith("restored turn 1: exact (restored its saved state)")
    assert branch.computed < 25


def test_a_new_process_restores_the_prefix_from_effctx_prefix_cache(report):
    (second,) = by_kind(report, "second-process")
    assert second.how.startswith("prefix cache hit: ")
    cold = report.turns[0]  # the prefix and the first message, all computed
    assert (second.prompt_tokens, second.computed) == (cold.prompt_tokens, cold.computed - second.reused)
    assert second.reused > second.computed  # the prefix restored, the message computed


def test_the_report_has_the_totals_and_the_ttft_curve(report):
    totals = report.totals()
    assert set(totals) == {"cold full prefill", "warm same prefix (second process)", "warm changed suffix",
                           "edited stable segment", "branch", "wall per turn"}
    assert all(pair["effctx"] is not None and pair["control"] is not None for pair in totals.values())
    assert [p[0] for p in report.curve()] == sorted(t.computed for t in report.turns)


def test_without_snapshots_a_branch_sends_the_conversation_again_and_keeps_what_precedes_the_edit(default_model,
                                                                                                      small):
    paged = run_workload(default_model, load_profile("ov-prefix-cache"), small)
    assert paged.control_name == "LLMPipeline.generate (openvino-genai)"
    assert paged.accounting_agrees, paged.accounting
    # The branch starts from turn 1, before the edit; the cache holds the edited conversation.
    (edit,) = by_kind(paged, "edit")
    (branch,) = by_kind(paged, "branch")
    assert branch.how == f"diverges from the resident tape at token {edit.reused}"
    assert (branch.reused, branch.computed) == (edit.reused, branch.prompt_tokens - edit.reused)


def test_on_an_evicting_cell_the_prefix_a_turn_loaded_is_computed_work_even_where_the_window_left_it(tmp_path, small):
    # A window of 64 tokens behind the small workload's prefix of more than twice that:
    # the tokens the prefix load computed are mostly gone when the first message is read.
    tiny = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    streaming = load_profile("streaming")
    window = streaming.with_changes(n_ctx=256, residency=replace(streaming.residency, recent_tokens=60, budget=64))
    report = run_workload(tiny, window, small, control=False)
    cold = report.turns[0]
    assert cold.prompt_tokens > 2 * 64
    assert (cold.reused, cold.computed) == (0, cold.prompt_tokens)
