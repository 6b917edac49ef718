"""`effctx cells`: the certification matrix: every cell (backend x profile x model) with
its status on this machine, what it may be said to hold, and its capabilities."""

from __future__ import annotations

import argparse
import json

from effctx_core.cli.options import add_runtime_options, model_from_args, profile_from_args, stdout_console
from effctx_core.contract import Capability
from effctx_core.units import format_count, format_rate


def add_parser(sub) -> None:
    cells = sub.add_parser("cells", help="the certification matrix: each cell (backend x profile x model) certified, "
                                         "uncertified, failed or unsupported here, with its figures")
    add_runtime_options(cells)
    cells.add_argument("--tasks", action="store_true", help="below the matrix, each certified cell's task families: "
                                                            "the score at each length, the median TTFT, the effective "
                                                            "context")
    cells.add_argument("--json", action="store_true")


def _yes(capability: Capability) -> str:
    return "yes" if capability.supported else "no"


def _effective(effective: dict | None) -> tuple[str, str]:
    """The effective context, and the longest effective lengths within the TTFT budget."""
    if effective is None:
        return "-", "-"
    shown = [format_count(n) if n else "-" for n in (effective["tokens"], effective["cold"], effective["warm"])]
    return shown[0], f"{shown[1]} / {shown[2]} (≤ {effective['ttft_budget_ms'] / 1000:g} s)"


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from effctx_core.certify.matrix import CERTIFIED, cell_matrix

    profile = profile_from_args(args)
    path = model_from_args(args, profile)
    matrix = cell_matrix(path, path.name)
    if args.json:
        print(json.dumps(matrix.to_dict(), indent=2))
        return 0
    table = Table(title=f"cells for {path.name} on this machine", title_justify="left")
    numbers = ("context", "effective", "≤ budget cold/warm", "prefill", "decode")
    for column in ("backend", "profile", "K/V", "policy", "shift", "exact", "status", *numbers, "why"):
        table.add_column(column, justify="right" if column in numbers else "left")
    for row in matrix.rows:
        c, p = row.cell, row.cell.profile_record
        caps = c.info.capabilities if c.info else None
        figures = row.figures()
        table.add_row(c.backend, c.profile, f"{p.kv_cache_type_k}/{p.kv_cache_type_v}" if p else "-",
                      p.residency.policy if p else "-", _yes(caps.position_shift) if caps else "-",
                      _yes(caps.exact_snapshot) if caps else "-", row.status,
                      format_count(row.certified_tokens) if row.certified_tokens else "-",
                      *_effective(row.effective),
                      *((format_rate(figures[f"{stage}_tps"]) if figures else None) or "-" for stage in ("prefill", "decode")),
                      row.note)
    console = stdout_console()
    console.print(table)
    for line in matrix.damaged:
        console.print(f"damaged certificate (left in place): {line}", highlight=False)
    if args.tasks:
        from effctx_core.cli.task_table import task_table

        certified = [(row.cell.profile, row.certificate) for row in matrix.rows
                     if row.status == CERTIFIED and row.certificate is not None]
        tables = [t for t in (task_table(profile, doc) for profile, doc in certified) if t is not None]
        for tasks in tables:
            console.print(tasks)
        if not tables:
            console.print("no certified cell has task families: `effctx certify` (the full plan) measures them",
                          highlight=False)
    return 0
