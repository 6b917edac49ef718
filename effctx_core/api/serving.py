"""A request's work on the engine thread: prompt, route, reply, and what it all measured.

Everything here runs as one job of the EngineService, under the engine's lock: rendering
and tokenizing (an RPC-hosted session's tokenizer is a pipe one thread uses at a time),
matching the conversation, the turn, and parsing the reply. A stream gets its text
through `on_text` as the reply is decoded, held back where it could still turn out to be
a stop string or a tool call.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from effctx_core.api.conversations import (
    Divergence,
    PromptSegment,
    diverge,
    find_conversation,
    message_hash,
    request_facts,
)
from effctx_core.api.errors import bad_request, context_exceeded
from effctx_core.api.holdback import TextHoldback
from effctx_core.api.models import ChatCompletionRequest, CompletionRequest, NamedToolChoice, content_text
from effctx_core.api.prompt import (
    BuiltPrompt,
    Rendering,
    build_prompt,
    keep_reply_tokens,
    last_said,
    rendering_for,
)
from effctx_core.api.tools import (
    HERMES_OPEN,
    MISTRAL_MARKER,
    PYTHON_TAG,
    ParsedReply,
    ToolCall,
    ToolFormat,
    parse_tool_calls,
    response_format_grammar,
    tool_call_grammar,
)
from effctx_core.cancel import CancelToken
from effctx_core.contract import DecodeConfig, TokenChunk
from effctx_core.engine.requests import RequestPrompt, RequestResult
from effctx_core.engine.session_engine import SessionEngine
from effctx_core.engine.turns import TurnExtras
from effctx_core.errors import ContextOverflowError, EffctxError
from effctx_core.events.trace import TurnResult
from effctx_core.residency import Segment
from effctx_core.residency.tracker import SegmentRun
from effctx_core.snapshots.conversations import conversation_label
from effctx_core.snapshots.tree import Node

# The markers a reply opens a tool call with, per format: text from one on is held back
# from a stream and parsed when the reply is complete.
_CALL_MARKERS = {ToolFormat.HERMES: (HERMES_OPEN,), ToolFormat.MISTRAL: (MISTRAL_MARKER,),
                 ToolFormat.LLAMA3_JSON: (PYTHON_TAG, '{"name"')}


@dataclass
class Delta:
    """Text a stream may send now, with the log-probabilities of the tokens it came from
    (OpenAI's `logprobs.content` entries)."""

    text: str
    logprobs: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class Served:
    """What a request produced, for its response and its log line."""

    id: str
    created: int
    model: str
    conversation: str | None
    prompt: BuiltPrompt | None
    result: RequestResult
    divergence: Divergence | None
    reply: ParsedReply
    template: dict | None  # the format the prompt was written in, and whether it stamps the date
    finish_reason: str
    logprobs: list[dict] | None  # OpenAI's logprobs.content entries, when asked
    label: str = ""  # the last message, as the tree's node names it
    versions: dict | None = None  # the diverging segment, both versions
    stable_computed: int | None = None  # modeled: what a stable prefix would have left to compute

    @property
    def turn(self) -> TurnResult:
        return self.result.turn


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def finish_reason(stop_reason: str, calls: bool) -> str:
    if calls:
        return "tool_calls"
    return "length" if stop_reason in ("max_tokens", "n_ctx") else "stop"


def normalised_messages(req: ChatCompletionRequest) -> list[dict]:
    """The request's messages as the renderer takes them: text contents, `developer` as
    `system`, tool calls as plain dicts."""
    out = []
    for m in req.messages:
        d: dict = {"role": "system" if m.role == "developer" else m.role, "content": content_text(m.content)}
        calls = getattr(m, "tool_calls", None)
        if calls:
            d["tool_calls"] = [c.model_dump() for c in calls]
        if getattr(m, "tool_call_id", None) is not None:
            d["tool_call_id"] = m.tool_call_id  # type: ignore[union-attr]
        if getattr(m, "name", None):
            d["name"] = m.name  # type: ignore[union-attr]
        out.append(d)
    return out


def _reply_message(reply: ParsedReply) -> dict:
    """The assistant message a client sends back for this reply."""
    calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
             for c in reply.calls]
    return {"role": "assistant", "content": reply.content, **({"tool_calls": calls} if calls else {})}


class _Stream:
    """The decode side of a stream: pieces in, safe text out."""

    def __init__(self, on_text: Callable[[Delta], None] | None, markers: tuple[str, ...],
                 logprobs: Callable[[list[TokenChunk]], list[dict]] | None):
        self._on_text = on_text
        self._holdback = TextHoldback(markers) if markers else None
        self._logprobs = logprobs
        self._pending: list[TokenChunk] = []
        self.tokens: list[TokenChunk] = []
        self.sent = ""

    def token(self, chunk: TokenChunk) -> None:
        self.tokens.append(chunk)
        if self._on_text is None:
            return
        if self._logprobs:
            self._pending.append(chunk)
        safe = self._holdback.feed(chunk.text) if self._holdback is not None else chunk.text
        if safe:
            self.send(safe)

    def send(self, text: str) -> None:
        if self._on_text is None or not text:
            return
        pending, self._pending = self._pending, []
        self.sent += text
        self._on_text(Delta(text, self._logprobs(pending) if self._logprobs is not None else []))

    def finish(self, final: str | None) -> None:
        """Send what is left of the final text (it always begins with what was sent)."""
        if final is not None and final.startswith(self.sent):
            self.send(final[len(self.sent):])


def _decode_config(req: ChatCompletionRequest | CompletionRequest, limit: int | None, n_ctx: int,
                   grammar: str | None, logprobs: int | None) -> DecodeConfig:
    # OpenAI's defaults: temperature 1, top_p 1; no limit means up to the context's end.
    return DecodeConfig(
        max_tokens=n_ctx if limit is None else limit,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        seed=req.seed, stop=req.stops, grammar=grammar, logprobs=logprobs,
    )


def _check_capabilities(engine: SessionEngine, grammar: str | None, logprobs: int | None, param: str) -> None:
    caps = engine.info.capabilities
    if grammar is not None and not caps.constrained_decoding.supported:
        raise bad_request(f"{param} needs constrained decoding, which this cell cannot do: "
                          f"{caps.constrained_decoding.reason}", param)
    if logprobs is not None and not caps.decode_logprobs.supported:
        raise bad_request(f"logprobs are not available on this cell: {caps.decode_logprobs.reason}", "logprobs")


def _grammar(req: ChatCompletionRequest, tools: list[dict], fmt: ToolFormat) -> tuple[str | None, str]:
    choice = req.tool_choice
    try:
        if tools and (choice == "required" or isinstance(choice, NamedToolChoice)):
            name = choice.function.name if isinstance(choice, NamedToolChoice) else None
            return tool_call_grammar(tools, name, fmt), "tool_choice"
        if req.response_format is not None:
            return response_format_grammar(req.response_format.model_dump(by_alias=True)), "response_format"
    except EffctxError as exc:
        raise bad_request(str(exc), "tool_choice" if tools and choice else "response_format") from exc
    return None, ""


def _run(engine: SessionEngine, prompt: RequestPrompt, config: DecodeConfig, extras: TurnExtras) -> RequestResult:
    try:
        return engine.request(prompt, config, extras)
    except ContextOverflowError as exc:
        raise context_exceeded(exc) from exc


def serve_chat(engine: SessionEngine, token: CancelToken, req: ChatCompletionRequest, rid: str,
               on_text: Callable[[Delta], None] | None) -> Served:
    created = int(time.time())
    tools = [t.model_dump(exclude_none=True) for t in req.tools or ()]
    messages = normalised_messages(req)
    choice = req.tool_choice.model_dump() if isinstance(req.tool_choice, NamedToolChoice) else req.tool_choice
    rendering: Rendering = rendering_for(engine.info, tools, choice)
    fmt = rendering.tool_format
    grammar, param = _grammar(req, tools, fmt)
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    _check_capabilities(engine, grammar, logprobs, param)
    try:
        built = build_prompt(engine.session, rendering, messages, bool(tools))
    except EffctxError as exc:
        raise bad_request(f"the chat template refused the conversation: {exc}", "messages") from exc
    facts = request_facts(messages, tools, rendering.identity, rendering.stamps_date, built.segments,
                          req.prompt_cache_key)
    conversation, earlier = find_conversation(engine.tree, facts, built.tokens)
    divergence = diverge(earlier, facts, built.tokens, engine.tree, engine.detokenize)
    kept = None
    if divergence.kind == "retokenized" and earlier is not None and divergence.at is not None:
        kept = keep_reply_tokens(built, rendering, engine.tree.tape(earlier.node.id), divergence.at,
                                 engine.detokenize)
        if kept is not None:
            built = kept
            facts = replace(facts, segments=built.segments)
            where = divergence.segment.label if divergence.segment is not None else "a reply"
            divergence = replace(divergence, kind="appended", retokenized_at=divergence.at, at=None, segment=None,
                                 offset=None, stored="", prompt="",
                                 detail=f"the reply resent in {where} kept in the tokens the model wrote it in")
    versions = _versions(engine, earlier.node if earlier is not None else None, divergence, built)
    parse_calls = bool(tools) and req.tool_choice != "none"
    markers = tuple(req.stops) + (_CALL_MARKERS[fmt] if parse_calls else ())
    entries = _entries(engine) if logprobs is not None else None
    stream = _Stream(on_text, markers, entries)
    parsed: list[ParsedReply] = []
    names = [t["function"]["name"] for t in tools]

    def node_metrics(turn: TurnResult) -> Mapping[str, object]:
        reply = parse_tool_calls(turn.text, fmt, names) if parse_calls else ParsedReply(turn.text, ())
        if req.parallel_tool_calls is False and len(reply.calls) > 1:
            reply = ParsedReply(reply.content, reply.calls[:1])
        parsed.append(reply)
        return facts.metrics(conversation, rid, message_hash(_reply_message(reply)))

    label = _node_label(messages)
    config = _decode_config(req, req.reply_limit, engine.n_ctx, grammar, logprobs)
    result = _run(engine, replace(built.request, request=rid), config,
                  TurnExtras(built.request.runs, stream.token, conversation_label(conversation, label), node_metrics))
    reply = parsed[0] if parsed else ParsedReply(result.turn.text, ())
    if not reply.calls:
        stream.finish(reply.content)
    stable = None
    if earlier is not None:
        # Had the prompt kept everything its conversation's last request held, only what
        # it appends would be computed.
        stable = min(result.computed, max(1, len(built.tokens) - engine.tree.tape_length(earlier.node.id)))
    return Served(rid, created, engine.model_name, conversation, built, result, divergence, reply,
                  {"identity": rendering.identity, "stamps_date": rendering.stamps_date},
                  finish_reason(result.turn.stop_reason, bool(reply.calls)),
                  entries(stream.tokens) if entries is not None else None, label, versions, stable)


# The most of a diverging segment's two versions an event carries (a tool catalogue or a
# document can be long; the start of the difference is what a person reads first).
VERSION_CHARS = 4000


def _versions(engine: SessionEngine, node: Node | None, divergence: Divergence,
              built: BuiltPrompt) -> dict | None:
    """The diverging segment as the conversation's last request had it and as this prompt
    has it, for a side-by-side view."""
    seg = divergence.segment
    if node is None or seg is None:
        return None
    stored = None
    for row in (node.metrics or {}).get("segments", ()):
        earlier = PromptSegment.from_json(row)
        if earlier.label == seg.label:
            stored = engine.detokenize(engine.tree.tape(node.id)[earlier.start:earlier.end])
            break
    prompt = engine.detokenize(built.tokens[seg.start:seg.end])
    return {"label": seg.label, "stored": None if stored is None else stored[:VERSION_CHARS],
            "prompt": prompt[:VERSION_CHARS]}


def _node_label(messages: list[dict]) -> str:
    last = last_said(messages)
    text = " ".join(str(last.get("content") or "").split())
    return (f"{last['role']}: " + text)[:60]


def serve_completion(engine: SessionEngine, token: CancelToken, req: CompletionRequest, rid: str,
                     on_text: Callable[[Delta], None] | None) -> Served:
    created = int(time.time())
    session = engine.session
    if isinstance(req.prompt, list) and req.prompt and isinstance(req.prompt[0], int):
        tokens = [int(t) for t in req.prompt]
        n_vocab = session.info.facts.vocab_size
        if any(not 0 <= t < n_vocab for t in tokens):
            raise bad_request(f"prompt token ids must be in 0..{n_vocab - 1}", "prompt")
        text = engine.detokenize(tokens)
    else:
        text = req.prompt if isinstance(req.prompt, str) else str(req.prompt[0])
        tokens = session.tokenize(text, add_bos=session.info.facts.add_bos)
    if not tokens:
        raise bad_request("the prompt is empty", "prompt")
    logprobs = req.logprobs
    _check_capabilities(engine, None, logprobs, "")
    entries = _entries(engine) if logprobs is not None else None
    stream = _Stream(on_text, tuple(req.stops), entries)
    prompt = RequestPrompt(tokens, [SegmentRun(Segment.USER, len(tokens), 0)], text, (), None)
    config = _decode_config(req, req.max_tokens, engine.n_ctx, None, logprobs)
    label = f"completion: {text[:40]}"
    result = _run(engine, replace(prompt, request=rid), config, TurnExtras(prompt.runs, stream.token, label))
    stream.finish(result.turn.text)
    return Served(rid, created, engine.model_name, None, None, result, None, ParsedReply(result.turn.text, ()), None,
                  finish_reason(result.turn.stop_reason, False),
                  entries(stream.tokens) if entries is not None else None, label)


def _entries(engine: SessionEngine) -> Callable[[list[TokenChunk]], list[dict]]:
    """OpenAI's `logprobs.content` for decoded tokens: each token, its log-probability,
    its bytes and the most likely alternatives (their text read on the engine thread)."""
    def entries(chunks: list[TokenChunk]) -> list[dict]:
        out = []
        for c in chunks:
            if c.logprob is None:
                continue
            top = [_entry(engine.detokenize([t]), lp) for t, lp in c.top]
            out.append({**_entry(c.text, c.logprob), "top_logprobs": top})
        return out
    return entries


def _entry(text: str, logprob: float) -> dict:
    return {"token": text, "logprob": logprob if math.isfinite(logprob) else -9999.0,
            "bytes": list(text.encode("utf-8"))}


def tool_call_json(calls: tuple[ToolCall, ...]) -> list[dict]:
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]

