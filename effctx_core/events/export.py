"""A trace as Chrome / Perfetto trace-event JSON, to look at prefill chunks, decode
tokens, evictions and restores on a timeline (ui.perfetto.dev or chrome://tracing)."""

from __future__ import annotations

from effctx_core.events.trace import (
    Event,
    NodeRestored,
    PrefillChunk,
    PrefixCacheLookup,
    ResidencyAction,
    SnapshotRestored,
    SnapshotTaken,
    TokenDecoded,
    TurnFinished,
)

PID = 1
THREADS = {"engine": 1, "prefill": 2, "decode": 3, "residency": 4, "snapshots": 5}


def _span(name: str, tid: str, end_ms: float, dur_ms: float, args: dict) -> dict:
    # Events are written when a step ends: the span starts its duration earlier.
    return {"name": name, "ph": "X", "pid": PID, "tid": THREADS[tid], "ts": round((end_ms - dur_ms) * 1000, 3),
            "dur": round(dur_ms * 1000, 3), "args": args}


def _instant(name: str, tid: str, at_ms: float, args: dict) -> dict:
    return {"name": name, "ph": "i", "s": "t", "pid": PID, "tid": THREADS[tid], "ts": round(at_ms * 1000, 3),
            "args": args}


def to_perfetto(events: tuple[Event, ...] | list[Event]) -> dict:
    out = [{"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": name}}
           for name, tid in THREADS.items()]
    out.append({"name": "process_name", "ph": "M", "pid": PID, "args": {"name": "effctx engine"}})
    for e in events:
        k, t = e.kind, e.t_ms
        if isinstance(e, PrefillChunk):
            out.append(_span(f"prefill {e.tokens}", "prefill", t, e.ms,
                             {"turn": e.turn, "stage": e.stage, "start": e.start, "tokens": e.tokens}))
        elif isinstance(e, TokenDecoded):
            out.append(_span(repr(e.text), "decode", t, e.ms, {"turn": e.turn, "index": e.index, "token": e.token}))
        elif isinstance(e, ResidencyAction):
            args = {"turn": e.turn, "stage": e.stage, "range": [e.start, e.end], "positions": [e.pos_start, e.pos_end]}
            out.append(_span(f"{e.action} {e.start}-{e.end}", "residency", t, e.ms, args))
        elif isinstance(e, (SnapshotTaken, SnapshotRestored)):
            out.append(_span(f"{k} {e.tokens} tokens", "snapshots", t, e.ms, {"bytes": e.bytes}))
        elif isinstance(e, NodeRestored):
            out.append(_span(f"restore {e.node} ({e.mode})", "snapshots", t, e.ms,
                             {"tokens": e.tokens, "recomputed": e.recomputed, "reason": e.reason}))
        elif isinstance(e, TurnFinished):
            r = e.result
            out.append(_span(f"turn {e.turn}", "engine", t, r.prefill_ms + r.decode_ms,
                             {"reused": r.reused, "prefilled": r.prefilled, "generated": r.generated,
                              "ttft_ms": r.ttft_ms, "stop": r.stop_reason}))
        elif isinstance(e, PrefixCacheLookup):
            out.append(_span(f"prefix cache {e.result}", "snapshots", t, e.ms, {"tokens": e.tokens}))
        elif k in ("session_opened", "turn_started", "prefix_checked", "node", "swap", "swap_cancelled", "error"):
            out.append(_instant(k, "engine", t, {f: v for f, v in vars(e).items() if f != "t_ms"}))
    return {"traceEvents": out, "displayTimeUnit": "ms"}
