"""OpenAI-style conversations, tools included, as prompt text, and where each message lies in it.

The endpoint gets messages as OpenAI clients send them, already normalised ("developer" is
"system", content is a string or None). A model with a chat template renders them as
llama-cpp-python and llama-server do (render_messages): the same globals, and
llama-server's polyfills for what a template cannot take (a system role, tool calls, tool
results, tool schemas). A base model gets the plain transcript the engine's own chat turns
write (render_plain), so a conversation sent through the endpoint and one typed in the
console put the same text on the tape.

segment_map says which characters of a prompt are the template's head, the system message,
the tools, each message and the generation prompt, so a request that diverges from a stored
state is reported by segment ("the tools changed", "the template re-renders message 1").
"""

from __future__ import annotations

import bisect
import functools
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, TypeVar

import jinja2

from effctx_core.transcript import PLAIN_TRANSCRIPT, ChatTemplateError, compile_template, failure_reason

Message = dict[str, Any]
ToolFormat = Literal["hermes", "llama3_json", "mistral"]
# (messages, add_generation_prompt, with_tools) -> prompt text; see template_renderer.
Renderer = Callable[[list[Message], bool, bool], str]

# The polyfills, in the order they are applied and reported.
TOOLS_IN_SYSTEM = "tools-in-system"
OBJECT_ARGUMENTS = "object-arguments"
TOOL_CALLS_AS_TEXT = "tool-calls-as-text"
TOOL_RESPONSES_AS_USER = "tool-responses-as-user"
SYSTEM_INTO_USER = "system-into-user"
_POLYFILL_ORDER = (TOOLS_IN_SYSTEM, OBJECT_ARGUMENTS, TOOL_CALLS_AS_TEXT, TOOL_RESPONSES_AS_USER, SYSTEM_INTO_USER)

# The tool block is part of the prompt's prefix: any change to this wording (or to how a
# schema is dumped) changes every cached state of every conversation with tools.
_TOOLS_OPENING = "# Tools\nYou may call one or more functions. Function signatures, one JSON object a line:\n<tools>\n"
_TOOLS_CLOSING = ("\n</tools>\nTo call a function, reply with "
                  '<tool_call>{"name": <function-name>, "arguments": <args-json-object>}</tool_call>')


# --------------------------------------------------------------------------- tool text


def tool_instructions(tools: Sequence[Mapping[str, Any]]) -> str:
    """The tool block for a model whose template does not write the tools itself: one
    schema a line, in the request's order, Hermes/Qwen style."""
    schemas = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return f"{_TOOLS_OPENING}{schemas}{_TOOLS_CLOSING}"


def with_tool_instructions(messages: Sequence[Mapping[str, Any]],
                           tools: Sequence[Mapping[str, Any]] | None) -> list[Message]:
    """The messages with the tool block at the end of the system message, which is
    created first when the conversation has none. Applying it twice changes nothing."""
    conversation = [dict(message) for message in messages]
    if not tools:
        return conversation
    block = tool_instructions(tools)
    if conversation and conversation[0].get("role") == "system":
        system = _text(conversation[0])
        if not system.endswith(block):
            conversation[0]["content"] = f"{system}\n\n{block}" if system else block
    else:
        conversation.insert(0, {"role": "system", "content": block})
    return conversation


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _arguments(arguments: Any) -> Any:
    # OpenAI sends arguments as a JSON string; templates written for Transformers, and the
    # tool-call text the model is asked for, hold the object. A string that is not JSON
    # stays what the client sent.
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def _function(call: Mapping[str, Any]) -> Mapping[str, Any]:
    function = call.get("function")
    return function if isinstance(function, Mapping) else {}


def _call_json(call: Mapping[str, Any]) -> str:
    function = _function(call)
    return json.dumps({"name": function.get("name"), "arguments": _arguments(function.get("arguments"))},
                      ensure_ascii=False)


# --------------------------------------------------------------------------- what a template does


@dataclass(frozen=True)
class TemplateFacts:
    """What a chat template does with tools, roles and the date, found by rendering small
    probe conversations (as llama-server's minja does) and by reading its source."""

    renders_tools: bool  # it writes the request's tool schemas itself
    stamps_date: bool  # it writes today's date: its prompts change from one day to the next
    tool_format: ToolFormat  # the tool-call syntax it teaches the model
    supports_system_role: bool
    supports_tool_calls: bool  # it writes an assistant's tool calls (with their arguments)
    supports_tool_responses: bool  # it writes a tool message's content
    requires_object_arguments: bool  # it writes tool-call arguments given as an object, not as a JSON string


_PROBE_TOOL_NAME = "effctx_probe_tool"
_PROBE_USER: Message = {"role": "user", "content": "effctx user probe"}
_PROBE_SYSTEM_TEXT = "effctx system probe"
_PROBE_RESULT_TEXT = "effctx tool result probe"
_PROBE_TOOL: Message = {"type": "function", "function": {
    "name": _PROBE_TOOL_NAME, "description": "A tool.",
    "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]}}}
_PROBE_ARGUMENTS = {"effctx_probe_argument": "value"}
# The argument's key as JSON or a Python dict writes it; an argument string written as a
# JSON string (escaped quotes) is not the arguments.
_ARGUMENT_MARKS = ('"effctx_probe_argument":', "'effctx_probe_argument':")


def _probe_call(arguments: Any) -> Message:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_probe", "type": "function", "function": {"name": _PROBE_TOOL_NAME, "arguments": arguments}}]}


def _compiled(source: str) -> jinja2.Template:
    try:
        return compile_template(source)
    except Exception as exc:  # noqa: BLE001 - a template is untrusted code: any failure means "not usable"
        raise ChatTemplateError(failure_reason(exc)) from exc


def _probe(template: jinja2.Template, messages: list[Message], tools: list[Message] | None = None) -> str:
    try:
        return template.render(messages=messages, tools=tools, tool_choice=None, add_generation_prompt=False,
                               bos_token="", eos_token="")
    except Exception:  # noqa: BLE001 - a refusal or a template bug both mean "it cannot take this"
        return ""


def _writes_arguments(template: jinja2.Template, arguments: Any) -> bool:
    text = _probe(template, [_PROBE_USER, _probe_call(arguments)])
    return any(mark in text for mark in _ARGUMENT_MARKS)


def _tool_format(source: str) -> ToolFormat:
    if "<tool_call>" in source:
        return "hermes"
    if "<|python_tag|>" in source or "ipython" in source:
        return "llama3_json"
    if "[TOOL_CALLS]" in source:
        return "mistral"
    return "hermes"  # what tool_instructions teaches a template that teaches nothing


@functools.lru_cache(maxsize=16)
def template_facts(source: str) -> TemplateFacts:
    """What the template does (see TemplateFacts); ChatTemplateError when it does not
    compile. Cached per template: every request asks."""
    template = _compiled(source)
    without_tools = _probe(template, [_PROBE_USER])
    with_tools = _probe(template, [_PROBE_USER], [_PROBE_TOOL])
    string_arguments = _writes_arguments(template, json.dumps(_PROBE_ARGUMENTS))
    object_arguments = _writes_arguments(template, _PROBE_ARGUMENTS)
    result = {"role": "tool", "tool_call_id": "call_probe", "name": _PROBE_TOOL_NAME, "content": _PROBE_RESULT_TEXT}
    return TemplateFacts(
        renders_tools=with_tools != without_tools and _PROBE_TOOL_NAME in with_tools,
        # Read from the source, not rendered: a template that stamps the date renders the
        # same all day, and its prompts change at midnight.
        stamps_date=any(mark in source for mark in ("strftime_now", "now(", "date_string")),
        tool_format=_tool_format(source),
        supports_system_role=_PROBE_SYSTEM_TEXT in _probe(
            template, [{"role": "system", "content": _PROBE_SYSTEM_TEXT}, _PROBE_USER]),
        supports_tool_calls=string_arguments or object_arguments,
        supports_tool_responses=_PROBE_RESULT_TEXT in _probe(
            template, [_PROBE_USER, _probe_call(json.dumps(_PROBE_ARGUMENTS)), result]),
        requires_object_arguments=object_arguments and not string_arguments,
    )


# --------------------------------------------------------------------------- rendering with a template


@dataclass(frozen=True)
class RenderedPrompt:
    text: str
    # What was rewritten for the template (TOOLS_IN_SYSTEM, SYSTEM_INTO_USER...), in the
    # order applied; empty when it took the conversation as it is.
    polyfills: tuple[str, ...] = ()


def _polyfilled(messages: list[Message], names: Collection[str]) -> list[Message]:
    conversation = [dict(message) for message in messages]
    if OBJECT_ARGUMENTS in names:
        for message in conversation:
            if message.get("tool_calls"):
                message["tool_calls"] = [{**call, "function": {**_function(call),
                                                               "arguments": _arguments(_function(call).get("arguments"))}}
                                         for call in message["tool_calls"]]
    if TOOL_CALLS_AS_TEXT in names:
        for message in conversation:
            if message.get("role") == "assistant" and message.get("tool_calls"):
                blocks = [f"<tool_call>\n{_call_json(call)}\n</tool_call>" for call in message.pop("tool_calls")]
                message["content"] = "\n".join([_text(message), *blocks] if _text(message) else blocks)
    if TOOL_RESPONSES_AS_USER in names:
        merged: list[Message] = []
        previous = None
        for message in conversation:
            role = message.get("role")
            if role != "tool":
                merged.append(message)
            elif previous == "tool":  # one user turn for the results of one round of calls
                merged[-1]["content"] += f"\n<tool_response>\n{_text(message)}\n</tool_response>"
            else:
                merged.append({"role": "user", "content": f"<tool_response>\n{_text(message)}\n</tool_response>"})
            previous = role
        conversation = merged
    if SYSTEM_INTO_USER in names:
        folded: list[Message] = []
        pending: list[str] = []
        for message in conversation:
            if message.get("role") == "system":
                pending.append(_text(message))
                continue
            if pending:
                system = "\n\n".join(pending)
                pending = []
                if message.get("role") == "user":
                    user = _text(message)
                    message = {**message, "content": f"{system}\n\n{user}" if user else system}
                else:
                    folded.append({"role": "user", "content": system})
            folded.append(message)
        if pending:
            folded.append({"role": "user", "content": "\n\n".join(pending)})
        conversation = folded
    return conversation


def render_messages(source: str, messages: Sequence[Mapping[str, Any]], *,
                    tools: Sequence[Mapping[str, Any]] | None = None, tool_choice: Any = None,
                    add_generation_prompt: bool = True, bos_token: str, eos_token: str,
                    strip_bos: bool) -> RenderedPrompt:
    """The conversation as the chat template renders it, with the globals llama-cpp-python
    and llama-server give a template.

    What the template cannot take is rewritten as llama-server's minja does, decided by
    template_facts: tools it does not write go into the system message; a system role it
    refuses or drops is folded into the next user message; tool calls it does not write
    become <tool_call> text in the assistant's content; tool results it does not take
    become <tool_response> user messages (consecutive ones one message); arguments it
    only writes as objects are parsed. A template that still refuses the conversation gets
    every rewrite that applies, once more. ChatTemplateError with the template's own
    message (one line) when it refuses that too.

    `strip_bos`: the tokenizer adds BOS itself, so a leading BOS text goes (as the
    engine's turns drop it).
    """
    template = _compiled(source)
    facts = template_facts(source)
    conversation = [dict(message) for message in messages]
    applied = set()
    if tools and not facts.renders_tools:
        conversation = with_tool_instructions(conversation, tools)
        applied.add(TOOLS_IN_SYSTEM)
    has_system = any(message.get("role") == "system" for message in conversation)
    has_calls = any(message.get("role") == "assistant" and message.get("tool_calls") for message in conversation)
    has_results = any(message.get("role") == "tool" for message in conversation)
    needed = set()
    if has_system and not facts.supports_system_role:
        needed.add(SYSTEM_INTO_USER)
    if has_calls and not facts.supports_tool_calls:
        needed.add(TOOL_CALLS_AS_TEXT)
    elif has_calls and facts.requires_object_arguments:
        needed.add(OBJECT_ARGUMENTS)
    if has_results and not facts.supports_tool_responses:
        needed.add(TOOL_RESPONSES_AS_USER)
    # The probes are small conversations; a real one can still trip a check they did not
    # (roles that must alternate once tool results are in), which the rewrites may avoid.
    usable = {name for name, used in ((SYSTEM_INTO_USER, has_system), (TOOL_CALLS_AS_TEXT, has_calls),
                                      (TOOL_RESPONSES_AS_USER, has_results)) if used}
    attempts = [needed] if usable <= needed else [needed, needed | usable]
    failure: Exception | None = None
    for names in attempts:
        if TOOL_CALLS_AS_TEXT in names:
            names = names - {OBJECT_ARGUMENTS}  # the text already holds them as objects
        try:
            text = template.render(messages=_polyfilled(conversation, names), tools=list(tools) if tools else None,
                                   tool_choice=tool_choice, add_generation_prompt=add_generation_prompt,
                                   bos_token=bos_token, eos_token=eos_token)
        except Exception as exc:  # noqa: BLE001 - a template is untrusted code: any failure means "refused"
            failure = exc
            continue
        if strip_bos and bos_token and text.startswith(bos_token):
            text = text[len(bos_token):]
        return RenderedPrompt(text, tuple(name for name in _POLYFILL_ORDER if name in applied | names))
    assert failure is not None
    raise ChatTemplateError(failure_reason(failure)) from failure


def template_renderer(source: str, *, tools: Sequence[Mapping[str, Any]] | None = None, tool_choice: Any = None,
                      bos_token: str, eos_token: str, strip_bos: bool) -> Renderer:
    """A request's rendering for segment_map: its template, tokens and tools fixed."""
    def render(messages: list[Message], add_generation_prompt: bool, with_tools: bool) -> str:
        return render_messages(source, messages, tools=tools if with_tools else None,
                               tool_choice=tool_choice if with_tools else None,
                               add_generation_prompt=add_generation_prompt, bos_token=bos_token,
                               eos_token=eos_token, strip_bos=strip_bos).text
    return render


# --------------------------------------------------------------------------- the plain transcript


def render_plain(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None, *,
                 add_generation_prompt: bool = True) -> str:
    """The conversation as the plain transcript, for a base model without a template: the
    system text first, then the very text PLAIN_TRANSCRIPT.render_turn puts on the tape for
    each user turn, so the endpoint and the console share states.

    An assistant message is its content as the endpoint returned it (with the model's
    leading space), then each tool call as ` <tool_call>{json}</tool_call>`; a tool result
    is `\\nTool (name): content` and opens the assistant's turn as a user message does. The
    generation prompt opens the assistant's turn unless the last message is the
    assistant's own (which the model then continues).
    """
    fmt = PLAIN_TRANSCRIPT
    conversation = with_tool_instructions(messages, tools)
    parts: list[str] = []
    lead = 0
    while lead < len(conversation) and conversation[lead].get("role") == "system":
        system = _text(conversation[lead]).strip()
        if system:
            parts.append(f"{system}\n\n")
        lead += 1
    first = True  # no turn written yet: the first one starts without a newline
    owed = False  # a turn was written that the assistant's label follows, once anything does
    for message in conversation[lead:]:
        role = message.get("role")
        newline = "" if first else "\n"
        if role == "assistant":
            parts.append(f"{newline}{fmt.assistant_prefix}")
            calls = "".join(f" <tool_call>{_call_json(call)}</tool_call>" for call in message.get("tool_calls") or ())
            parts.append(_text(message) + calls)
            owed = False
        else:
            if owed:
                parts.append(f"\n{fmt.assistant_prefix}")
            parts.append(f"{newline}{_speaker(message)}{_text(message).strip()}")
            owed = True
        first = False
    if add_generation_prompt and owed:
        parts.append(f"\n{fmt.assistant_prefix}")
    elif add_generation_prompt and first:
        parts.append(fmt.assistant_prefix)
    return "".join(parts)


def _speaker(message: Mapping[str, Any]) -> str:
    role = message.get("role")
    if role == "tool":
        name = message.get("name") or message.get("tool_call_id")
        return f"Tool ({name}): " if name else "Tool: "
    if role == "system":  # a system message after the first turn speaks in place
        return "System: "
    return PLAIN_TRANSCRIPT.user_prefix


def plain_renderer(tools: Sequence[Mapping[str, Any]] | None = None) -> Renderer:
    """A request's rendering for segment_map on a base model: its tools fixed."""
    def render(messages: list[Message], add_generation_prompt: bool, with_tools: bool) -> str:
        return render_plain(messages, tools if with_tools else None, add_generation_prompt=add_generation_prompt)
    return render


# --------------------------------------------------------------------------- the segment map


@dataclass(frozen=True)
class CharSegment:
    label: str  # "template", "system", "tools", "message 3 (tool)", "generation prompt"
    index: int | None  # the message's index in the request's messages; None for the template's own text
    role: str | None
    start: int
    end: int


@dataclass(frozen=True)
class CharSegmentMap:
    """The prompt's characters by segment: consecutive, non-empty, covering it exactly."""

    segments: tuple[CharSegment, ...]
    # The first message the template renders differently once the conversation goes on
    # (a stripped <think>, tools moved to the last user message): a later request that
    # extends this one does not extend its prompt from there. None when it never does.
    rerenders: int | None = None
    tools: tuple[int, int] | None = None  # the characters the request's tools add

    def at(self, index: int) -> CharSegment | None:
        return segment_at(self.segments, index)


class _Span(Protocol):
    @property
    def start(self) -> int: ...

    @property
    def end(self) -> int: ...


_SpanT = TypeVar("_SpanT", bound=_Span)


def segment_at(segments: Sequence[_SpanT], index: int) -> _SpanT | None:
    """The segment holding `index` (a character, or a token once the segments are in
    tokens); None outside them all. The segments are in order and do not overlap."""
    position = bisect.bisect_right(segments, index, key=lambda segment: segment.start) - 1
    if position >= 0 and index < segments[position].end:
        return segments[position]
    return None


def _common_prefix_length(a: str, b: str) -> int:
    # Halving over slice comparisons runs in C; prompts are tens of thousands of characters.
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _common_suffix_length(a: str, b: str, limit: int) -> int:
    low, high = 0, limit
    while low < high:
        middle = (low + high + 1) // 2
        if a[len(a) - middle:] == b[len(b) - middle:]:
            low = middle
        else:
            high = middle - 1
    return low


def _reappearance(shorter: str, text: str, split: int) -> int | None:
    """Where the longest ending of `shorter` after `split` ends again in `text` after
    `split`: a message the full conversation renders differently still closes as it did
    alone (a stripped <think> still ends its reply with the answer and <|im_end|>)."""
    tail = shorter[split:]
    # An ending found in text implies every shorter ending is found too, so halving works.
    low, high = 0, len(tail)
    while low < high:
        middle = (low + high + 1) // 2
        if text.find(tail[len(tail) - middle:], split) >= 0:
            low = middle
        else:
            high = middle - 1
    return text.find(tail[len(tail) - low:], split) + low if low else None


def _content(message: Mapping[str, Any]) -> str | None:
    # Templates trim contents; an empty one cannot be found.
    return _text(message).strip() or None


def _message_starts(render: Renderer, conversation: list[Message], has_tools: bool,
                    text: str) -> tuple[list[int], int | None]:
    """Where each message starts in `text` and where the generation prompt does (the last
    entry), and the first message the template re-renders; one render per prefix."""
    starts: list[int] = []
    rerenders: int | None = None
    renders: list[str | None] = []
    for k in range(len(conversation) + 1):
        floor = starts[-1] if starts else 0
        previous = _content(conversation[k - 1]) if k else None
        try:
            shorter = render(conversation[:k], False, has_tools)
        except Exception:  # noqa: BLE001 - many templates cannot render some prefixes (an empty conversation)
            # The text between two messages' contents goes to the later message.
            found = text.find(previous, floor) if previous else -1
            starts.append(found + len(previous) if previous and found >= 0 else floor)
            renders.append(None)
            continue
        renders.append(shorter)
        if text.startswith(shorter):
            starts.append(max(floor, len(shorter)))
            continue
        if k == 0:
            # The template writes a head of its own only when a first message does not (a
            # default system prompt): there is no head.
            starts.append(0)
            continue
        split = _common_prefix_length(shorter, text)
        end = shorter.rfind(previous) if previous else -1
        if previous and end >= 0 and split >= end + len(previous):
            # Only how the last message closes changed once another followed it (a system
            # message folded into the next user message): nothing earlier was re-rendered.
            starts.append(max(floor, split))
            continue
        if rerenders is None:
            rerenders = max((j for j in range(k) if starts[j] <= split), default=0)
        following = _content(conversation[k]) if k < len(conversation) else None
        found = text.find(following, max(split, floor)) if following else -1
        upper = found if found >= 0 else len(text)
        reappears = _reappearance(shorter, text, split)
        starts.append(min(max(split if reappears is None else reappears, split, floor), upper))
    if renders[0] is None and len(conversation) > 0 and renders[1] is not None and text.startswith(renders[1]):
        starts[0] = _head_end(render, conversation[0], has_tools, renders[1], text)
    return starts, rerenders


def _head_end(render: Renderer, first: Message, has_tools: bool, once: str, text: str) -> int:
    """Where the first message starts, for a template that cannot render an empty
    conversation (it reads messages[0]) but writes a head of its own (a default system
    prompt, the date): the text a second copy of the message adds is the message's own,
    which the first copy ends with too."""
    try:
        twice = render([first, dict(first)], False, has_tools)
    except Exception:  # noqa: BLE001 - roles that must alternate: no head is found
        return 0
    own = twice[len(once):] if twice.startswith(once) else ""
    return len(once) - len(own) if own and once.endswith(own) else 0


def _tools_range(render: Renderer, conversation: list[Message], text: str) -> tuple[int, int] | None:
    try:
        without = render(conversation, True, False)
    except Exception:  # noqa: BLE001 - without tools is only for comparison
        return None
    # The suffix first: a block with the same text on both sides ("\n\n") is then placed
    # leftmost, where a block appended to a message starts.
    suffix = _common_suffix_length(text, without, min(len(text), len(without)))
    prefix = _common_prefix_length(text[:len(text) - suffix], without[:len(without) - suffix])
    return (prefix, len(text) - suffix) if prefix < len(text) - suffix else None


def _carve(segments: list[CharSegment], tools: tuple[int, int]) -> list[CharSegment]:
    start, end = tools
    before = [replace(s, end=min(s.end, start)) for s in segments if s.start < start]
    after = [replace(s, start=max(s.start, end)) for s in segments if s.end > end]
    return [*before, CharSegment("tools", None, None, start, end), *after]


def _label(index: int, role: str | None) -> str:
    return "system" if index == 0 and role == "system" else f"message {index} ({role})"


def segment_map(render: Renderer, messages: Sequence[Mapping[str, Any]], has_tools: bool) -> CharSegmentMap:
    """The segments of the prompt render(messages, True, has_tools) (see template_renderer
    and plain_renderer); whatever that render raises.

    The template's head ("template") is what it writes for no messages at all (a default
    system prompt, the date); for a template that cannot render an empty conversation, the
    text before the first message's own text (found by rendering that message twice).
    Message k is the characters the prefix messages[:k+1] adds to messages[:k], each
    rendered without the generation prompt; the generation prompt is what the whole
    conversation adds with it. A template that renders a prefix differently once the
    conversation goes on (see CharSegmentMap.rerenders) has that message's end found
    where its closing text reappears, bounded by where the next message's content is.
    When has_tools, the tools are the characters the prompt has beyond the one rendered
    without them, cut out of the segment they lie in (the system message's, for a
    template that writes them there).
    """
    conversation = [dict(message) for message in messages]
    text = render(conversation, True, has_tools)
    starts, rerenders = _message_starts(render, conversation, has_tools, text)
    segments = [CharSegment("template", None, None, 0, starts[0])]
    for k, message in enumerate(conversation):
        role = message.get("role")
        segments.append(CharSegment(_label(k, role), k, role, starts[k], starts[k + 1]))
    segments.append(CharSegment("generation prompt", None, None, starts[-1], len(text)))
    segments = [segment for segment in segments if segment.start < segment.end]
    tools = _tools_range(render, conversation, text) if has_tools else None
    if tools is not None:
        segments = _carve(segments, tools)
    return CharSegmentMap(tuple(segments), rerenders, tools)
