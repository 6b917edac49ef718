"""The JSON a request is answered with: OpenAI's objects, llama-server's `timings`, and
effctx's own account of the request (`effctx`)."""

from __future__ import annotations

from effctx_core.api.serving import Served, tool_call_json


def usage(s: Served) -> dict:
    r = s.result
    return {
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": s.turn.generated,
        "total_tokens": r.prompt_tokens + s.turn.generated,
        # Measured: the prompt tokens this request did not compute.
        "prompt_tokens_details": {"cached_tokens": r.cached},
    }


def _per(ms: float, n: int) -> tuple[float | None, float | None]:
    if n <= 0 or ms <= 0:
        return None, None
    return round(ms / n, 3), round(n * 1000.0 / ms, 2)


def timings(s: Served) -> dict:
    """llama-server's `timings` (server_slot_stats::to_json), so its tools read effctx."""
    t, r = s.turn, s.result
    prompt_per_token, prompt_per_second = _per(t.prefill_ms, r.computed)
    predicted_per_token, predicted_per_second = _per(t.decode_ms, t.generated)
    return {
        "cache_n": r.cached, "prompt_n": r.computed, "prompt_ms": round(t.prefill_ms, 3),
        "prompt_per_token_ms": prompt_per_token, "prompt_per_second": prompt_per_second,
        "predicted_n": t.generated, "predicted_ms": round(t.decode_ms, 3),
        "predicted_per_token_ms": predicted_per_token, "predicted_per_second": predicted_per_second,
    }


def effctx_object(s: Served) -> dict:
    r, t = s.result, s.turn
    route = r.route
    d = s.divergence
    return {
        "conversation": s.conversation,
        "template": s.template,
        "reused": r.cached, "computed": r.computed, "dropped": t.dropped,
        "route": {"kind": route.kind.value, "node": route.node, "key": route.key,
                  "restore_ms": round(route.ms, 3) if route.key else None, "note": route.reason or None},
        "node": r.node,
        "diverged_at": None if d is None else d.at,
        "divergence": None if d is None else d.to_json(),
        "cache": {"cause": t.prefix_cause, "reason": t.prefix_reason},
        "segments": [] if s.prompt is None else [
            {"label": g.label, "index": g.index, "role": g.role, "start": g.start, "end": g.end}
            for g in s.prompt.segments],
        "ttft_ms": None if t.ttft_ms is None else round(t.ttft_ms, 3),
        "prefill_tps": round(t.prefill_tps, 2), "decode_tps": round(t.decode_tps, 2),
        "stop_reason": t.stop_reason,
    }


def chat_completion(s: Served) -> dict:
    message: dict = {"role": "assistant", "content": s.reply.content}
    if s.reply.calls:
        message["tool_calls"] = tool_call_json(s.reply.calls)
    return {
        "id": s.id, "object": "chat.completion", "created": s.created, "model": s.model,
        "choices": [{"index": 0, "message": message, "finish_reason": s.finish_reason,
                     "logprobs": {"content": s.logprobs} if s.logprobs is not None else None}],
        "usage": usage(s), "timings": timings(s), "effctx": effctx_object(s),
    }


def text_completion(s: Served) -> dict:
    return {
        "id": s.id, "object": "text_completion", "created": s.created, "model": s.model,
        "choices": [{"index": 0, "text": s.turn.text, "finish_reason": s.finish_reason,
                     "logprobs": _legacy_logprobs(s.logprobs) if s.logprobs is not None else None}],
        "usage": usage(s), "timings": timings(s), "effctx": effctx_object(s),
    }


def _legacy_logprobs(entries: list[dict]) -> dict:
    offsets, at = [], 0
    for e in entries:
        offsets.append(at)
        at += len(e["token"])
    return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
            "text_offset": offsets}


def chunk(rid: str, created: int, model: str, delta: dict | None, finish: str | None = None,
          logprobs: list[dict] | None = None, chat: bool = True) -> dict:
    if chat:
        choice: dict = {"index": 0, "delta": delta or {}, "finish_reason": finish,
                        "logprobs": None if logprobs is None else {"content": logprobs}}
        return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [choice]}
    return {"id": rid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": (delta or {}).get("content", ""), "finish_reason": finish,
                         "logprobs": None}]}


def served_event(s: Served, endpoint: str, queue_ms: float) -> dict:
    """The fields of the request's RequestServed event: what the console's requests screen
    and a replay of the trace show of it."""
    r, t, d = s.result, s.turn, s.divergence
    return {
        "request": s.id, "status": "cancelled" if t.stop_reason == "cancelled" else "done", "endpoint": endpoint,
        "conversation": s.conversation or "", "turn": r.turn_number, "prompt_tokens": r.prompt_tokens,
        "reused": r.cached, "computed": r.computed, "dropped": t.dropped, "route": r.route.kind.value,
        "node": r.route.node or "", "finish": s.finish_reason, "ttft_ms": t.ttft_ms,
        "prefill_ms": round(t.prefill_ms, 3), "prefill_tps": round(t.prefill_tps, 2),
        "decode_tps": round(t.decode_tps, 2), "generated": t.generated, "queue_ms": round(queue_ms, 3),
        "segments": () if s.prompt is None else tuple(tuple(g.to_json()) for g in s.prompt.segments),
        "divergence": None if d is None else d.to_json(), "versions": s.versions,
        "stable_computed": s.stable_computed, "label": s.label,
    }
