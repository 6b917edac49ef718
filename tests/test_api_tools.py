"""Tool calls for the OpenAI-compatible endpoint: reading calls out of a reply, the grammars
that force a call or a JSON reply (checked by llama.cpp's own grammar parser and sampler on
a tiny GGUF's vocabulary), and the streaming holdback of markers."""

from __future__ import annotations

import ctypes
import json
import math
import re
from pathlib import Path

import pytest

from effctx_core.api.holdback import TextHoldback
from effctx_core.api.tools import (
    ParsedReply,
    ToolFormat,
    parse_tool_calls,
    response_format_grammar,
    tool_call_grammar,
)
from effctx_core.backends.gguf.binding import llama_cpp
from effctx_core.backends.gguf.grammar import JSON_OBJECT_GRAMMAR, json_schema_grammar, wrap_grammar
from effctx_core.backends.gguf.runtime import load_model
from effctx_core.errors import EffctxError
from tests.helpers.tiny_gguf import EOS_ID, VOCAB, write_tiny_llama_gguf

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "get_time"}},
]
NAMES = ("get_weather", "get_time")
HERMES = ToolFormat.HERMES
LLAMA3 = ToolFormat.LLAMA3_JSON
MISTRAL = ToolFormat.MISTRAL


def _calls(reply: ParsedReply) -> list[tuple[str, dict]]:
    return [(call.name, json.loads(call.arguments)) for call in reply.calls]


# --- parsing ---------------------------------------------------------------------------


def test_hermes_call_with_text_around_it():
    text = 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\nOne moment.'
    reply = parse_tool_calls(text, HERMES, NAMES)
    assert reply.content == "Let me look.\n\nOne moment."
    assert _calls(reply) == [("get_weather", {"city": "Paris"})]


def test_hermes_two_calls_keep_their_order():
    text = (
        'Checking both.<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    )
    reply = parse_tool_calls(text, HERMES, NAMES)
    assert reply.content == "Checking both."
    assert _calls(reply) == [("get_weather", {"city": "Oslo"}), ("get_time", {})]


def test_calls_alone_have_no_content():
    text = '\n<tool_call>{"name": "get_time", "arguments": {}}</tool_call>\n'
    assert parse_tool_calls(text, HERMES, NAMES).content is None


def test_hermes_argument_may_hold_the_closing_tag():
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "</tool_call>"}}</tool_call>'
    assert _calls(parse_tool_calls(text, HERMES, NAMES)) == [("get_weather", {"city": "</tool_call>"})]


def test_llama3_call_after_python_tag_with_parameters():
    text = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Rome", "days": 2}}'
    reply = parse_tool_calls(text, LLAMA3, NAMES)
    assert reply.content is None
    assert _calls(reply) == [("get_weather", {"city": "Rome", "days": 2})]


def test_llama3_bare_json_call():
    text = ' {"name": "get_time", "arguments": {}} '
    assert _calls(parse_tool_calls(text, LLAMA3, NAMES)) == [("get_time", {})]


def test_llama3_calls_separated_by_semicolons():
    text = '{"name": "get_time", "parameters": {}}; {"name": "get_weather", "parameters": {"city": "Lima"}}'
    assert _calls(parse_tool_calls(text, LLAMA3, NAMES)) == [("get_time", {}), ("get_weather", {"city": "Lima"})]


def test_llama3_json_reply_that_is_no_call_stays_text():
    text = '{"answer": 42}'
    assert parse_tool_calls(text, LLAMA3, NAMES) == ParsedReply(content=text, calls=())


def test_mistral_list_of_calls_after_text():
    text = 'Sure. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Bern"}}, {"name": "get_time", "arguments": {}}]'
    reply = parse_tool_calls(text, MISTRAL, NAMES)
    assert reply.content == "Sure."
    assert _calls(reply) == [("get_weather", {"city": "Bern"}), ("get_time", {})]


def test_malformed_json_makes_the_reply_text():
    text = 'Hm. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"</tool_call>'
    assert parse_tool_calls(text, HERMES, NAMES) == ParsedReply(content=text, calls=())


def test_unclosed_hermes_call_makes_the_reply_text():
    text = '<tool_call>{"name": "get_time", "arguments": {}}'
    assert parse_tool_calls(text, HERMES, NAMES) == ParsedReply(content=text, calls=())


def test_one_unknown_tool_makes_the_whole_reply_text():
    text = '[TOOL_CALLS][{"name": "get_time", "arguments": {}}, {"name": "rm_rf", "arguments": {}}]'
    assert parse_tool_calls(text, MISTRAL, NAMES) == ParsedReply(content=text, calls=())


def test_reply_without_calls_is_its_text_unchanged():
    text = "  The weather is fine.\n"
    assert parse_tool_calls(text, HERMES, NAMES) == ParsedReply(content=text, calls=())


def test_arguments_are_a_json_string_that_keeps_non_ascii():
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Zürich"}}</tool_call>'
    (call,) = parse_tool_calls(text, HERMES, NAMES).calls
    assert call.arguments == '{"city": "Zürich"}'


def test_each_call_gets_its_own_openai_style_id():
    text = '{"name": "get_time", "arguments": {}}; {"name": "get_time", "arguments": {}}'
    first, second = parse_tool_calls(text, LLAMA3, NAMES).calls
    assert re.fullmatch(r"call_[0-9a-f]{24}", first.id)
    assert first.id != second.id


# --- grammars: construction ------------------------------------------------------------


def test_wrap_grammar_renames_root_around_a_clashing_name():
    gbnf = 'root ::= "[" call ("," root)? "]"\ncall ::= "x"  # root call\n'
    assert wrap_grammar(gbnf, 'say "', "\\\n") == (
        'root ::= "say \\"" call-1 "\\\\\\n"\n'
        'call-1 ::= "[" call ("," call-1)? "]"\ncall ::= "x"  # root call\n'
    )


def test_named_function_that_is_not_offered_is_an_error():
    with pytest.raises(EffctxError, match="^tool_choice names function 'get_news', which is not among the tools$"):
        tool_call_grammar(TOOLS, "get_news", HERMES)


def test_tool_without_a_function_name_is_an_error():
    with pytest.raises(EffctxError, match=r"^tools\[1\] is not a function tool with a name$"):
        tool_call_grammar([TOOLS[0], {"type": "function", "function": {}}], "required", HERMES)


def test_text_response_format_needs_no_grammar():
    assert response_format_grammar({"type": "text"}) is None


def test_json_object_response_format_is_any_object():
    assert response_format_grammar({"type": "json_object"}) == JSON_OBJECT_GRAMMAR


def test_json_schema_response_format_is_its_schema():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    spec = {"type": "json_schema", "json_schema": {"name": "count", "schema": schema, "strict": True}}
    assert response_format_grammar(spec) == json_schema_grammar(schema)


def test_json_schema_response_format_without_schema_is_an_error():
    with pytest.raises(EffctxError, match=r"^response_format\.json_schema\.schema must be a JSON schema object$"):
        response_format_grammar({"type": "json_schema", "json_schema": {"name": "x"}})


def test_unknown_response_format_type_is_an_error():
    with pytest.raises(EffctxError, match="^response_format type 'yaml' is not one of text, json_object, json_schema$"):
        response_format_grammar({"type": "yaml"})


def test_schema_the_converter_cannot_take_is_an_error():
    with pytest.raises(EffctxError, match="^cannot turn the JSON schema into a grammar: "):
        json_schema_grammar({"$ref": "other.json"})


# --- grammars in llama.cpp ---------------------------------------------------------------


@pytest.fixture(scope="module")
def vocab(tmp_path_factory: pytest.TempPathFactory):
    path: Path = write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")
    return load_model(path, vocab_only=True).vocab


def _generates(vocab, grammar: str, text: str) -> bool:
    """Whether llama.cpp's grammar sampler lets `text` be written, one byte token at a
    time, and then lets the model stop (the grammar is complete)."""
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    assert sampler, "llama.cpp rejected the grammar"
    try:
        for token in [*(VOCAB.index(f"<0x{b:02X}>") for b in text.encode()), EOS_ID]:
            candidate = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
            arr = llama_cpp.llama_token_data_array(
                data=ctypes.cast(candidate, llama_cpp.llama_token_data_p), size=1, selected=-1, sorted=False
            )
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(arr))
            if math.isinf(arr.data[0].logit):
                return False
            if token != EOS_ID:
                llama_cpp.llama_sampler_accept(sampler, token)
        return True
    finally:
        llama_cpp.llama_sampler_free(sampler)


GRAMMARS = {
    "named hermes": lambda: tool_call_grammar(TOOLS, "get_weather", HERMES),
    "required mistral": lambda: tool_call_grammar(TOOLS, "required", MISTRAL),
    "required llama3": lambda: tool_call_grammar(TOOLS, None, LLAMA3),
    "json_object": lambda: response_format_grammar({"type": "json_object"}),
    "json_schema": lambda: response_format_grammar(
        {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "array", "items": {"enum": ['a"\\b', 1]}}}}
    ),
}


@pytest.mark.model
@pytest.mark.parametrize("name", GRAMMARS)
def test_llama_cpp_accepts_the_grammar(vocab, name):
    grammar = GRAMMARS[name]()
    assert grammar is not None
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    assert sampler
    llama_cpp.llama_sampler_free(sampler)


FORCED = {
    HERMES: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>',
    MISTRAL: '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]',
    LLAMA3: '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}',
}


@pytest.mark.model
@pytest.mark.parametrize("fmt", FORCED)
def test_named_grammar_generates_the_call(vocab, fmt):
    assert _generates(vocab, tool_call_grammar(TOOLS, "get_weather", fmt), FORCED[fmt])


@pytest.mark.parametrize("fmt", FORCED)
def test_forced_call_parses_back(fmt):
    reply = parse_tool_calls(FORCED[fmt], fmt, NAMES)
    assert reply.content is None
    assert _calls(reply) == [("get_weather", {"city": "Paris", "days": 3})]


@pytest.mark.model
def test_required_grammar_generates_a_call_to_either_tool(vocab):
    grammar = tool_call_grammar(TOOLS, "required", MISTRAL)
    assert _generates(vocab, grammar, '[TOOL_CALLS][{"name": "get_time", "arguments": {}}]')


@pytest.mark.model
def test_named_grammar_refuses_another_tool(vocab):
    grammar = tool_call_grammar(TOOLS, "get_weather", LLAMA3)
    assert not _generates(vocab, grammar, '{"name": "get_time", "arguments": {}}')


@pytest.mark.model
def test_json_object_grammar_refuses_an_array(vocab):
    assert not _generates(vocab, JSON_OBJECT_GRAMMAR, "[1]")


@pytest.mark.model
def test_json_object_grammar_refuses_a_raw_newline_in_a_string(vocab):
    assert not _generates(vocab, JSON_OBJECT_GRAMMAR, '{"a": "x\ny"}')


@pytest.mark.model
def test_schema_grammar_writes_a_const_with_quote_and_backslash(vocab):
    assert _generates(vocab, json_schema_grammar({"const": 'a"\\b'}), '"a\\"\\\\b"')


# --- streaming holdback ----------------------------------------------------------------

MARKERS = ["<tool_call>", "[TOOL_CALLS]", "<|python_tag|>", "STOP"]


def test_holdback_holds_a_marker_start_until_it_completes():
    holdback = TextHoldback(MARKERS)
    assert holdback.feed("Hi <tool_") == "Hi "
    assert holdback.feed("call>{") == ""
    assert holdback.marker_seen == "<tool_call>"


def test_holdback_releases_text_that_stops_being_a_marker():
    holdback = TextHoldback(MARKERS)
    assert holdback.feed("a <tool") == "a "
    assert holdback.feed("box") == "<toolbox"
    assert holdback.marker_seen is None


def test_holdback_finds_a_marker_split_across_three_pieces():
    holdback = TextHoldback(MARKERS)
    assert [holdback.feed(p) for p in ("x[TOO", "L_CA", "LLS][{")] == ["x", "", ""]
    assert holdback.marker_seen == "[TOOL_CALLS]"


def test_holdback_stops_inside_one_piece():
    holdback = TextHoldback(MARKERS)
    assert holdback.feed("done STOP more") == "done "
    assert holdback.marker_seen == "STOP"


def test_holdback_sends_nothing_after_a_marker():
    holdback = TextHoldback(MARKERS)
    holdback.feed("<|python_tag|>")
    assert (holdback.feed('{"name": "x"} <tool'), holdback.flush()) == ("", "")


def test_holdback_flush_returns_the_held_tail():
    holdback = TextHoldback(MARKERS)
    assert holdback.feed("the end <|pyth") == "the end "
    assert holdback.flush() == "<|pyth"
