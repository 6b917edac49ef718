"""What the requests table and the request inspector write for a request: its status,
route and divergence in a few words, and the words' colours (a theme's, by role)."""

from __future__ import annotations

import time

from effctx_core.events.requests import PREFILLING, STABLE_KINDS, RequestRow
from effctx_core.units import format_count, format_ms, format_rate
from effctx_tui.themes import MUTED

# The roles a cell's text takes, as theme styles (rich_style and Content read them).
STYLES = {"": "", "muted": MUTED, "good": "$success", "warn": "$warning", "bad": "$error", "live": "$accent"}

_STATUS_STYLE = {"queued": "muted", "done": "", "cancelled": "warn", "failed": "bad"}
_ROUTES = {"resident": "resident", "restored": "restored", "prefix_cache": "prefix cache", "cold": "cold"}


def status_cell(row: RequestRow) -> tuple[str, str]:
    if row.status == PREFILLING and row.prefill_total:
        return f"prefilling {format_count(row.prefilled)}/{format_count(row.prefill_total)}", "live"
    return row.status, _STATUS_STYLE.get(row.status, "live" if row.served is None else "")


def route_words(route: str, node: str) -> str:
    """resident, restored n12, prefix cache, cold ("" before the request was routed)."""
    words = _ROUTES.get(route, route)
    return f"{words} {node}" if route == "restored" and node else words


def where_cell(row: RequestRow) -> tuple[str, str]:
    """Where the prompt left its conversation: its segment and token ("system @25 · date
    changed"); appended and new conversations, which left nothing, say only that."""
    served = row.served
    d = served.divergence if served is not None else None
    if d is None:
        return "", ""
    kind = d["kind"]
    if kind in STABLE_KINDS:
        return ("appended", "good") if kind == "appended" else ("new conversation", "muted")
    segment, at = d.get("segment"), d.get("at")
    where = " ".join(([segment["label"]] if segment else []) + ([f"@{format_count(at)}"] if at is not None else []))
    return f"{where} · {kind.replace('_', ' ')}" if where else kind.replace("_", " "), "warn"


def clock(seconds: float) -> str:
    """A wall-clock time of day, local, as the snapshot tree shows creation times."""
    return time.strftime("%H:%M:%S", time.localtime(seconds))


def ttft_cell(row: RequestRow) -> str:
    served = row.served
    return "" if served is None or served.ttft_ms is None else format_ms(served.ttft_ms)


def decode_cell(row: RequestRow) -> str:
    served = row.served
    return (format_rate(served.decode_tps) or "") if served is not None and served.generated else ""
