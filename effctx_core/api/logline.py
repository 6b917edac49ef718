"""One line per request for the server's log: who, how much was reused, from where, why
the prompt left its conversation, and how fast the reply came."""

from __future__ import annotations

from effctx_core.api.serving import Served
from effctx_core.units import format_count, format_ms


def log_line(s: Served) -> str:
    r, t = s.result, s.turn
    parts = [f"{s.id[-8:]}", s.conversation or "completion", f"{format_count(r.prompt_tokens)} prompt tokens",
             f"reused {format_count(r.cached)}", f"computed {format_count(r.computed)}"]
    route = r.route
    parts.append(f"route {route.kind.value}" + (f" {route.node}" if route.node else ""))
    d = s.divergence
    if d is not None:
        parts.append(f"diverged at {format_count(d.at)} in {d.segment.label}: {d.kind}" if d.at is not None and
                     d.segment is not None else d.kind)
    parts.append("TTFT " + (format_ms(t.ttft_ms) if t.ttft_ms is not None else "none"))
    if t.generated:
        parts.append(f"decode {t.decode_tps:.1f} tok/s")
    parts.append(s.finish_reason if t.stop_reason != "cancelled" else "cancelled")
    return " · ".join(parts)
