"""A chat request as the model's prompt: rendered in its format, tokenized, and cut into
segments (system prompt, tool schemas, each message, the generation prompt).

The model's chat template renders the conversation with the globals llama-cpp-python and
llama-server pass; a base model without one gets the plain transcript, which renders a
conversation to exactly the text effctx's own chat turns put on the tape. A template that
does not render `tools` itself gets the tool schemas in its system message.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
from dataclasses import dataclass
from typing import Callable, Sequence

from effctx_core.api.conversations import PromptSegment
from effctx_core.api.tools import ToolFormat
from effctx_core.backends.tape import common_prefix_length
from effctx_core.contract import ModelInfo, Session
from effctx_core.engine.requests import RequestPrompt
from effctx_core.residency import Segment
from effctx_core.residency.tracker import SegmentRun
from effctx_core.transcript import PLAIN_TRANSCRIPT, TemplateFormat, chat_format_for
from effctx_core.transcript_messages import (
    Renderer,
    plain_renderer,
    segment_map,
    template_facts,
    template_renderer,
)

_KINDS = {"system": Segment.SYSTEM, "user": Segment.USER, "assistant": Segment.ASSISTANT, "tool": Segment.TOOL}


@dataclass(frozen=True)
class Rendering:
    """How this model's prompts are written."""

    render: Renderer  # (messages, add_generation_prompt, with_tools) -> text
    identity: str  # the format's identity: a template's digest or the plain transcript's name
    stamps_date: bool
    tool_format: ToolFormat
    stop: tuple[str, ...]
    opening: str | None
    special: bool  # the text holds control-token text to tokenize as those tokens
    polyfills: tuple[str, ...] = ()


def rendering_for(info: ModelInfo, tools: Sequence[dict], tool_choice: object = None) -> Rendering:
    """`tool_choice` as the request gave it (a string or OpenAI's named-function object):
    templates are given it, as llama-server gives it."""
    facts = info.facts
    tools = list(tools)
    source = facts.chat_template
    if source is None:
        return Rendering(plain_renderer(tools or None), PLAIN_TRANSCRIPT.identity, False, ToolFormat.HERMES, PLAIN_TRANSCRIPT.stop,
                         PLAIN_TRANSCRIPT.turn_opening, PLAIN_TRANSCRIPT.special_tokens)
    known = template_facts(source)
    fmt = chat_format_for(facts)
    stop, opening = (fmt.stop, fmt.turn_opening) if isinstance(fmt, TemplateFormat) else ((), None)
    render = template_renderer(source, tools=tools or None, tool_choice=tool_choice, bos_token=facts.bos_text or "",
                               eos_token=facts.eos_text or "", strip_bos=facts.add_bos)

    # A template not usable turn by turn still renders whole conversations: named by its digest.
    identity = fmt.identity if isinstance(fmt, TemplateFormat) else f"jinja-sha256:{hashlib.sha256(source.encode()).hexdigest()}"
    return Rendering(render, identity, known.stamps_date, ToolFormat(known.tool_format), stop, opening, True)


@dataclass(frozen=True)
class BuiltPrompt:
    text: str
    tokens: list[int]
    segments: tuple[PromptSegment, ...]
    rerenders: int | None  # the first message the template writes differently later on
    request: RequestPrompt


@functools.lru_cache(maxsize=4)
def _pieces(identity: str) -> dict[int, str]:
    """Each token's text, as the prompts of one runtime identity met them (a vocabulary
    does not change)."""
    return {}


def _token_ends(session: Session, tokens: list[int], text: str) -> list[int] | None:
    """Where in `text` each token ends, from the tokens' own texts; None when they do not
    add up to the text (a token that holds part of a character, a tokenizer that adds a
    space), and the boundaries are found by tokenizing each segment's prefix instead."""
    known = _pieces(session.info.identity.digest())
    facts = session.info.facts
    texts = []
    for i, t in enumerate(tokens):
        if i == 0 and facts.add_bos and t == facts.bos_token_id:
            texts.append("")  # the BOS the tokenizer adds is not in the text
            continue
        piece = known.get(t)
        if piece is None:
            piece = known[t] = session.detokenize([t])
        texts.append(piece)
    if "".join(texts) != text:
        return None
    return list(itertools.accumulate(len(piece) for piece in texts))


def build_prompt(session: Session, rendering: Rendering, messages: list[dict], has_tools: bool) -> BuiltPrompt:
    info = session.info
    text = rendering.render(messages, True, has_tools)
    cmap = segment_map(rendering.render, messages, has_tools)
    tokens = session.tokenize(text, add_bos=info.facts.add_bos, special=rendering.special)
    ends = _token_ends(session, tokens, text)
    segments: list[PromptSegment] = []
    start = 0
    for i, seg in enumerate(cmap.segments):
        if i == len(cmap.segments) - 1:
            end = len(tokens)
        elif ends is not None:
            # The tokens that end by the segment's last character (one that straddles
            # the boundary goes with the earlier segment).
            end = bisect.bisect_right(ends, seg.end)
        else:
            end = common_prefix_length(
                tokens, session.tokenize(text[:seg.end], add_bos=info.facts.add_bos, special=rendering.special))
        end = max(end, start)
        segments.append(PromptSegment(seg.label, seg.index, seg.role, start, end))
        start = end
    return _built(text, tokens, segments, cmap.rerenders, last_said(messages).get("content") or "", rendering)


def last_said(messages: list[dict]) -> dict:
    """The message a request answers: its last user message or tool result."""
    return next((m for m in reversed(messages) if m["role"] in ("user", "tool")), messages[-1])


def _built(text: str, tokens: list[int], segments: Sequence[PromptSegment], rerenders: int | None, said: str,
           rendering: Rendering) -> BuiltPrompt:
    runs = [SegmentRun(_KINDS.get(s.role or "", Segment.SYSTEM if s.label == "tools" else Segment.OTHER),
                       s.end - s.start, 0) for s in segments if s.end > s.start]
    request = RequestPrompt(tokens, runs, said, rendering.stop, rendering.opening)
    return BuiltPrompt(text, tokens, tuple(segments), rerenders, request)


def keep_reply_tokens(built: BuiltPrompt, rendering: Rendering, stored: Sequence[int], at: int,
                      detokenize: Callable[[Sequence[int]], str]) -> BuiltPrompt | None:
    """The prompt with an earlier reply in the tokens the model wrote it in.

    A client sends a reply back as text, and its tokenization need not be the one the
    model sampled (" model" may come back as " mod" "el"): the prompt then parts from the
    stored state inside the reply, and everything after it is computed again. When the
    prompt's text from `at` on begins with exactly the stored tape's text from `at` on,
    the stored tokens stand for that text: the same text, the tokens the model saw.
    None when the texts differ."""
    rest = detokenize(stored[at:])
    tokens = built.tokens
    text, j = "", at
    while len(text) < len(rest) and j < len(tokens):
        text += detokenize(tokens[j:j + 1])
        j += 1
    if text != rest or j >= len(tokens):
        return None
    shift = len(stored) - j
    spliced = list(stored) + tokens[j:]
    segments = [PromptSegment(g.label, g.index, g.role, g.start if g.start <= at else g.start + shift,
                              g.end if g.end <= at else g.end + shift) for g in built.segments]
    return _built(built.text, spliced, segments, built.rerenders, built.request.input_text, rendering)
