"""GBNF grammars for llama.cpp's grammar sampler: a JSON schema's grammar, any JSON object,
and a grammar wrapped in literal text (a tool call's markers around its JSON).

The schema conversion is llama-cpp-python's pure-Python port of llama.cpp's converter,
with two fixes that llama.cpp's own C++ converter has and the vendored port lacks: literals
escape backslashes (a const or property name holding a backslash or quote otherwise ends
the GBNF string early), and a JSON string never holds a raw control character (the port
lets the model write a raw newline into a string, which is not JSON and json.loads rejects).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from effctx_core.backends.gguf.binding import llama_cpp
from effctx_core.errors import EffctxError

__all__ = ["JSON_OBJECT_GRAMMAR", "json_schema_grammar", "wrap_grammar"]

_llama_grammar = llama_cpp.llama_grammar

# llama.cpp's current `char` rule: the port's `[^"\\]` admits control characters.
_JSON_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'

_LITERAL_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _literal(text: str) -> str:
    """`text` as a GBNF string literal; other control characters as \\x escapes, since
    llama.cpp's parser reads any other byte of the literal as itself."""
    out = []
    for ch in text:
        if ch in _LITERAL_ESCAPES:
            out.append(_LITERAL_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


class _SchemaConverter(_llama_grammar.SchemaConverter):
    def _format_literal(self, literal: str) -> str:
        return _literal(literal)

    def _add_primitive(self, name: str, rule: Any) -> str:
        if rule is _llama_grammar.PRIMITIVE_RULES["char"]:
            rule = _llama_grammar.BuiltinRule(_JSON_CHAR, [])
        return str(super()._add_primitive(name, rule))


def json_schema_grammar(schema: dict) -> str:
    """The GBNF grammar (root rule `root`) of the JSON documents that `schema` allows.

    A schema the converter cannot take (an unsupported $ref, an unknown type) raises
    EffctxError with the converter's reason."""
    try:
        # A copy through JSON: the converter rewrites $ref values in place, and a value
        # that is not JSON fails here with a reason rather than somewhere inside it.
        own = json.loads(json.dumps(schema))
        converter = _SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        converter.visit(converter.resolve_refs(own, "input"), "")
        return str(converter.format_grammar())
    except Exception as exc:  # the converter signals a bad schema by assert, KeyError, ValueError...
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise EffctxError(f"cannot turn the JSON schema into a grammar: {reason}") from exc


# Any JSON object; llama-cpp-python's JSON_GBNF allows runs of up to 21 whitespace
# characters after every token, the converter's grammar one optional space.
JSON_OBJECT_GRAMMAR: str = json_schema_grammar({"type": "object"})

_NAME = re.compile(r"[A-Za-z0-9-]+")
_ROOT_DEFINITION = re.compile(r"(?m)^[ \t]*root[ \t]*::=")


def _skip_delimited(gbnf: str, start: int, close: str) -> int:
    """The index after the `close` that ends the literal or character class at `start`."""
    i = start + 1
    while i < len(gbnf) and gbnf[i] != close:
        i += 2 if gbnf[i] == "\\" else 1
    return i + 1


def _name_spans(gbnf: str) -> Iterator[tuple[int, int]]:
    """The spans of the rule names in `gbnf`, defined or referenced: the words outside
    string literals, character classes, token references, repetition bounds and comments."""
    i, n = 0, len(gbnf)
    while i < n:
        ch = gbnf[i]
        if ch == '"':
            i = _skip_delimited(gbnf, i, '"')
        elif ch == "[":
            i = _skip_delimited(gbnf, i, "]")
        elif ch in "<{#":
            # <token> has no escapes, {m,n} holds digits, a comment runs to the line's end.
            end = gbnf.find({"<": ">", "{": "}", "#": "\n"}[ch], i)
            i = n if end < 0 else end + 1
        elif (m := _NAME.match(gbnf, i)) is not None:
            yield m.span()
            i = m.end()
        else:
            i += 1


def wrap_grammar(gbnf: str, before: str, after: str) -> str:
    """`gbnf` between two literal texts: its `root` rule is renamed (to a name it does not
    use) and the new root is `root ::= "<before>" <old root> "<after>"`; an empty text
    adds nothing."""
    if _ROOT_DEFINITION.search(gbnf) is None:
        raise EffctxError("cannot wrap the grammar: it defines no root rule")
    spans = list(_name_spans(gbnf))
    names = {gbnf[a:b] for a, b in spans}
    inner = "call"
    suffix = 0
    while inner in names:
        suffix += 1
        inner = f"call-{suffix}"
    parts, last = [], 0
    for a, b in spans:
        if gbnf[a:b] == "root":
            parts += [gbnf[last:a], inner]
            last = b
    parts.append(gbnf[last:])
    sequence = [_literal(before)] if before else []
    sequence.append(inner)
    if after:
        sequence.append(_literal(after))
    return f"root ::= {' '.join(sequence)}\n" + "".join(parts)
