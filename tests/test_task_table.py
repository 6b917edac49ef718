"""A certificate's task families as `effctx certify` and `effctx cells --tasks` print them."""

from __future__ import annotations

import io

from rich.console import Console

from effctx_core.certify.effective import effective_context
from effctx_core.cli.task_table import task_table
from tests.helpers.task_rows import grid, row


def rendered(document: dict) -> list[str]:
    table = task_table("fast-long", document)
    assert table is not None
    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(table)
    return [line.rstrip() for line in out.getvalue().splitlines()]


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.split("│")[1:-1]]


def document(tasks: dict) -> dict:
    return {"quality": {"tasks": tasks}, "context": {"effective": effective_context(tasks, 0.8, 10_000)}}


def test_each_family_has_its_score_at_each_length_and_its_certified_context():
    lines = rendered(document({
        "passkey": grid(row(1024, 1.0, 2000, 90), row(8192, 1.0, 21000, 95), certified=8192),
        "multikey": grid(row(1024, 0.75, 3000, 110), row(8192, 0.5, 23000, 105), certified=None)}))
    assert lines[0] == "fast-long: task score by prompt length (threshold 0.8)"
    assert [cells(line) for line in lines if line.startswith(("│ passkey", "│ multikey"))] == [
        ["passkey", "1.00", "1.00", "8,192"], ["multikey", "0.75", "0.50", "-"]]


def test_the_mean_and_the_median_ttft_stand_below_with_the_effective_context_sentence():
    lines = rendered(document({"passkey": grid(row(1024, 1.0, 2000, 90), row(8192, 1.0, 21000, 95), certified=8192)}))
    assert [cells(line) for line in lines if line.startswith(("│ mean", "│ TTFT"))] == [
        ["mean", "1.00", "1.00", "8,192"], ["TTFT cold", "2.0 s", "21.0 s", ""], ["TTFT warm", "0.1 s", "0.1 s", ""]]
    assert lines[-1] == "effective context 8,192; at TTFT ≤ 10 s: 1,024 (cold), 8,192 (warm)"


def test_a_certificate_from_before_the_task_families_has_no_table():
    assert task_table("exact", {"quality": {"passkey": {}, "nll": {}}, "context": {"certified": 2048}}) is None
