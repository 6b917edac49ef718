"""A certificate's task families as a table: each family's score at each length and its
certified context, the families' mean, and the median cold and warm TTFT, with the
effective context below (`effctx certify` after a run, `effctx cells --tasks`)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from effctx_core.certify.effective import effective_sentence


def _seconds(ms: float | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.1f} s"


def task_table(profile: str, document: dict) -> Group | None:
    """None for a certificate made before the task families."""
    tasks: dict = document["quality"].get("tasks") or {}
    effective = document["context"].get("effective")
    if not tasks or effective is None:
        return None
    lengths = sorted({row["length"] for grid in tasks.values() for row in grid["by_length"]})
    table = Table()
    table.add_column("family")
    for length in lengths:
        table.add_column(f"{length:,}", justify="right")
    table.add_column("certified", justify="right")
    for family, grid in tasks.items():
        scores = {row["length"]: f"{row['score']:.2f}" for row in grid["by_length"]}
        table.add_row(family, *(scores.get(length, "-") for length in lengths),
                      f"{grid['certified']:,}" if grid["certified"] else "-")
    by_length = {row["length"]: row for row in effective["by_length"]}
    table.add_section()
    table.add_row("mean", *(f"{by_length[n]['score']:.2f}" if n in by_length else "-" for n in lengths),
                  f"{effective['tokens']:,}" if effective["tokens"] else "-")
    for key, name in (("cold_ttft_ms", "TTFT cold"), ("warm_ttft_ms", "TTFT warm")):
        table.add_row(name, *(_seconds(by_length[n][key]) if n in by_length else "-" for n in lengths), "")
    # Title and sentence as lines of their own: a table wraps its title to its own width.
    return Group(Text(f"{profile}: task score by prompt length (threshold {effective['threshold']:g})"), table,
                 Text(effective_sentence(effective)))
