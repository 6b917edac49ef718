"""Tool calls in a model's text, both ways: reading the calls out of a finished reply in one
of three chat formats, and the grammars that force a call (tool_choice "required" or a
named function) or a JSON reply (response_format).

A reply is all calls or plain text: a call that does not parse, or names a tool the
request did not offer, turns the whole reply back into text, so a client never runs half
of what the model meant.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from effctx_core.backends.gguf.grammar import JSON_OBJECT_GRAMMAR, json_schema_grammar, wrap_grammar
from effctx_core.errors import EffctxError

__all__ = [
    "HERMES_CLOSE",
    "HERMES_OPEN",
    "MISTRAL_MARKER",
    "PYTHON_TAG",
    "ParsedReply",
    "ToolCall",
    "ToolFormat",
    "parse_tool_calls",
    "response_format_grammar",
    "tool_call_grammar",
]

HERMES_OPEN = "<tool_call>"
HERMES_CLOSE = "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
MISTRAL_MARKER = "[TOOL_CALLS]"


class ToolFormat(StrEnum):
    """How a model family writes its tool calls."""

    HERMES = "hermes"  # <tool_call>{"name": …, "arguments": {…}}</tool_call>, one block a call
    LLAMA3_JSON = "llama3_json"  # [<|python_tag|>]{"name": …, "parameters": {…}}; … ; …
    MISTRAL = "mistral"  # [TOOL_CALLS][{"name": …, "arguments": {…}}, …]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # a JSON object, as OpenAI's function.arguments carries it


@dataclass(frozen=True)
class ParsedReply:
    content: str | None  # None when the reply is calls and nothing else
    calls: tuple[ToolCall, ...]


class _NotACall(Exception):
    """The reply holds something that looks like a call but is not a valid one."""


# strict=False: a raw control character inside a string is how a model writes a newline
# in an argument; json.dumps escapes it on the way out.
_DECODER = json.JSONDecoder(strict=False)


def _new_id() -> str:
    return "call_" + secrets.token_hex(12)


def _call(obj: Any, tool_names: Collection[str]) -> ToolCall:
    if not isinstance(obj, dict):
        raise _NotACall
    name = obj.get("name")
    # Llama 3's own prompt format says "parameters"; what models trained on OpenAI traces
    # write is "arguments".
    arguments = obj.get("arguments", obj.get("parameters"))
    if not isinstance(name, str) or name not in tool_names or not isinstance(arguments, dict):
        raise _NotACall
    return ToolCall(id=_new_id(), name=name, arguments=json.dumps(arguments, ensure_ascii=False))


def _json_at(text: str, pos: int) -> tuple[Any, int]:
    """The JSON value that starts at `pos` (after whitespace), and the index after it."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    try:
        return _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        raise _NotACall from exc


def _hermes(text: str, tool_names: Collection[str]) -> Iterator[tuple[int, int, list[ToolCall]]]:
    pos = 0
    while (start := text.find(HERMES_OPEN, pos)) >= 0:
        # The JSON first, then the closing tag: an argument may well hold "</tool_call>".
        obj, after = _json_at(text, start + len(HERMES_OPEN))
        rest = text[after:].lstrip()
        if not rest.startswith(HERMES_CLOSE):
            raise _NotACall
        pos = len(text) - len(rest) + len(HERMES_CLOSE)
        yield start, pos, [_call(obj, tool_names)]


def _mistral(text: str, tool_names: Collection[str]) -> Iterator[tuple[int, int, list[ToolCall]]]:
    pos = 0
    while (start := text.find(MISTRAL_MARKER, pos)) >= 0:
        items, end = _json_at(text, start + len(MISTRAL_MARKER))
        if not isinstance(items, list) or not items:
            raise _NotACall
        yield start, end, [_call(item, tool_names) for item in items]
        pos = end


def _llama3(text: str, tool_names: Collection[str]) -> Iterator[tuple[int, int, list[ToolCall]]]:
    start = text.find(PYTHON_TAG)
    if start >= 0:
        pos = start + len(PYTHON_TAG)
    else:
        # Without the tag a call is the whole reply; a reply that merely starts with JSON
        # and is no call falls out as text below.
        stripped = text.lstrip()
        if not stripped.startswith("{"):
            return
        start = pos = len(text) - len(stripped)
    calls = []
    while True:
        obj, pos = _json_at(text, pos)
        calls.append(_call(obj, tool_names))
        rest = text[pos:].lstrip()
        if not rest.startswith(";"):
            break
        pos = len(text) - len(rest) + 1
    if text[pos:].strip():
        raise _NotACall
    yield start, len(text), calls


_PARSERS = {ToolFormat.HERMES: _hermes, ToolFormat.LLAMA3_JSON: _llama3, ToolFormat.MISTRAL: _mistral}


def parse_tool_calls(text: str, fmt: ToolFormat, tool_names: Collection[str]) -> ParsedReply:
    """The calls in a finished reply written in `fmt`, and the text around them.

    Content is the text outside the calls' markers, stripped, or None when that is empty
    and there are calls. A reply without calls, or with any call that is malformed or
    names a tool outside `tool_names`, is returned whole as content."""
    calls: list[ToolCall] = []
    outside: list[str] = []
    pos = 0
    try:
        for start, end, found in _PARSERS[fmt](text, tool_names):
            outside.append(text[pos:start])
            calls += found
            pos = end
    except _NotACall:
        return ParsedReply(content=text, calls=())
    if not calls:
        return ParsedReply(content=text, calls=())
    outside.append(text[pos:])
    content = "".join(outside).strip()
    return ParsedReply(content=content or None, calls=tuple(calls))


# The text a forced call is wrapped in: what each format's parser looks for.
_WRAPPERS = {
    ToolFormat.HERMES: (HERMES_OPEN + "\n", "\n" + HERMES_CLOSE),
    ToolFormat.LLAMA3_JSON: ("", ""),
    ToolFormat.MISTRAL: (MISTRAL_MARKER + "[", "]"),
}


def _function(tool: Any, index: int) -> dict:
    function = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise EffctxError(f"tools[{index}] is not a function tool with a name")
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise EffctxError(f"tools[{index}] ({function['name']}) has parameters that are not a JSON schema object")
    return function


def _call_schema(function: dict) -> dict:
    return {
        "type": "object",
        "properties": {
            "name": {"const": function["name"]},
            "arguments": function.get("parameters") or {"type": "object"},
        },
        "required": ["name", "arguments"],
    }


def tool_call_grammar(tools: list[dict], choice: str | None, fmt: ToolFormat) -> str:
    """The grammar of exactly one call written in `fmt`: to any of `tools` when `choice` is
    None or "required" (OpenAI's tool_choice "required"), else to the function that
    `choice` names (tool_choice {"type": "function", "function": {"name": …}}).

    EffctxError when the named function is not among the tools, when there are no tools
    to choose from, or when a tool is not a function with a name."""
    functions = [_function(tool, i) for i, tool in enumerate(tools)]
    if choice is None or choice == "required":
        if not functions:
            raise EffctxError('tool_choice "required" needs at least one tool')
        schema = {"anyOf": [_call_schema(f) for f in functions]}
    else:
        named = [f for f in functions if f["name"] == choice]
        if not named:
            raise EffctxError(f"tool_choice names function {choice!r}, which is not among the tools")
        schema = _call_schema(named[0])
    before, after = _WRAPPERS[fmt]
    grammar = json_schema_grammar(schema)
    return wrap_grammar(grammar, before, after) if before or after else grammar


def response_format_grammar(response_format: dict) -> str | None:
    """The grammar a response_format asks for: None for "text", any JSON object for
    "json_object" (or, as llama-cpp-python's server allows, its "schema"), the schema's
    documents for "json_schema". EffctxError names what is wrong with any other shape."""
    if not isinstance(response_format, dict):
        raise EffctxError("response_format must be an object")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema")
        if schema is None:
            return JSON_OBJECT_GRAMMAR
        if not isinstance(schema, dict):
            raise EffctxError("response_format.schema must be a JSON schema object")
        return json_schema_grammar(schema)
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict):
            raise EffctxError('response_format of type "json_schema" needs a json_schema object')
        schema = spec.get("schema")
        if not isinstance(schema, dict):
            raise EffctxError("response_format.json_schema.schema must be a JSON schema object")
        return json_schema_grammar(schema)
    raise EffctxError(f"response_format type {kind!r} is not one of text, json_object, json_schema")
