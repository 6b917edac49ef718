"""A cell's effective context, from its certificate's task families: the longest length
at which, and at every shorter one, the families' mean score stays at or above the
threshold (RULER's rule); and the longest effective length whose time to first token
stays within a budget, cold (every token prefilled) and warm (the prompt's stable part
restored from a state, the question prefilled).
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable

from effctx_core.bench.task_grid import longest_holding


def effective_context(tasks: dict, threshold: float, ttft_budget_ms: float) -> dict:
    """`tasks`: each family's grid as the certificate keeps it (quality.tasks)."""
    rows: dict[int, list[dict]] = {}
    for grid in tasks.values():
        for row in grid["by_length"]:
            rows.setdefault(row["length"], []).append(row)
    # A length every family was measured at: a mean over fewer would flatter it.
    lengths = sorted(length for length, got in rows.items() if len(got) == len(tasks))
    scores = {length: round(statistics.fmean(r["score"] for r in rows[length]), 4) for length in lengths}
    by_length: list[dict[str, Any]] = [{"length": length, "score": scores[length],
                  "cold_ttft_ms": _median(r["cold_ttft_ms"] for r in rows[length]),
                  "warm_ttft_ms": _median(r["warm_ttft_ms"] for r in rows[length])} for length in lengths]
    effective = longest_holding(list(scores.items()), threshold)
    within = [r for r in by_length if effective is not None and r["length"] <= effective]
    return {
        "threshold": threshold, "tokens": effective, "ttft_budget_ms": ttft_budget_ms,
        "cold": _within_budget(within, "cold_ttft_ms", ttft_budget_ms),
        "warm": _within_budget(within, "warm_ttft_ms", ttft_budget_ms),
        "by_length": by_length,
    }


def _median(values: Iterable[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return round(statistics.median(measured), 1) if measured else None


def _within_budget(rows: list[dict], key: str, budget_ms: float) -> int | None:
    """The longest length at which, and at every shorter one, the time was measured and
    stays within the budget."""
    return longest_holding([(r["length"], 1.0 if r[key] is not None and r[key] <= budget_ms else 0.0)
                            for r in rows], 1.0)


def effective_sentence(effective: dict) -> str:
    """`effective context 8,192 at TTFT ≤ 10 s (cold), 32,768 (warm)`."""
    tokens = effective.get("tokens")
    if tokens is None:
        return f"no effective context (mean task score below {effective['threshold']:.0%} at the shortest length)"
    budget = effective["ttft_budget_ms"] / 1000
    cold, warm = (f"{n:,}" if n is not None else "none" for n in (effective["cold"], effective["warm"]))
    return f"effective context {tokens:,}; at TTFT ≤ {budget:g} s: {cold} (cold), {warm} (warm)"
