"""How a conversation becomes text for the model.

A model that carries a chat template gets it (TemplateFormat); a base model without one
gets a plain transcript (PLAIN_TRANSCRIPT), since llama-cpp-python's fallback for such
models ("llama-2") is wrong for them. A template that cannot be used turn by turn gets
the plain transcript too, and `chat_format_report` says why.

Either format exposes what the engine needs for a turn: `render_turn` (the text the turn
appends to the tape), `stop`, `turn_opening`, `special_tokens`, and `identity`, which
the runtime identity records so states never mix across formats.

The endpoint's OpenAI-style conversations (tools, tool calls, tool results) are rendered
in the same environment by transcript_messages, which also maps a prompt's segments.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import jinja2.ext
import jinja2.nodes
import jinja2.parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from effctx_core.contract import ModelFacts
from effctx_core.errors import EffctxError


@dataclass(frozen=True)
class ChatFormat:
    name: str
    user_prefix: str
    assistant_prefix: str

    # Whether the rendered text holds control-token text to tokenize as those tokens.
    special_tokens: bool = False

    @property
    def identity(self) -> str:
        """What the runtime identity records of this format."""
        return self.name

    @property
    def turn_opening(self) -> str:
        """How a user turn opens after a reply: what the model writes when it ends its
        reply by starting the next turn, so a reply that ends on exactly this keeps it."""
        return "\n" + self.user_prefix.rstrip()

    @property
    def stop(self) -> tuple[str, ...]:
        """Every speaker's label at the start of a line: a base model that goes on past its
        reply writes the next turn, the user's or a made-up one of its own."""
        return self.turn_opening, "\n" + self.assistant_prefix.rstrip()

    def render_turn(self, user_text: str, first: bool, opened: bool = False) -> str:
        """The text a new user turn adds to the tape, ending where the model writes;
        `opened`: the tape already ends with the turn's opening."""
        if opened:
            head = self.user_prefix[len(self.user_prefix.rstrip()):]
        else:
            head = ("" if first else "\n") + self.user_prefix
        return f"{head}{user_text.strip()}\n{self.assistant_prefix}"


PLAIN_TRANSCRIPT = ChatFormat(
    name="plain-transcript-v1",
    user_prefix="User: ",
    assistant_prefix="Assistant:",
)


@dataclass(frozen=True)
class TemplateFormat:
    """A chat template cut into the pieces a turn appends, so the tape only ever grows.

    The first turn appends head + user text + generation prompt; a later one appends the
    end-of-reply text + user text + generation prompt. That is exactly what the template
    renders for the whole conversation (chat_format_report checks it), so each turn's
    tape is a prefix of the next one's and every earlier turn is reused.
    """

    template_sha256: str
    head: str  # before the first user message, without a BOS the tokenizer adds itself
    generation_prompt: str  # between a user message and where the model writes
    reply_end: str  # between the end of a reply and the next user message

    name: ClassVar[str] = "jinja-template"
    # The pieces hold the template's control-token text (<|im_start|>, <s>...), which
    # only means those tokens when the tokenizer parses special tokens.
    special_tokens: ClassVar[bool] = True

    @property
    def identity(self) -> str:
        return f"jinja-sha256:{self.template_sha256}"

    @property
    def turn_opening(self) -> str:
        """The end-of-reply text up to the next user message's own whitespace: a reply
        that ends on exactly this (the model wrote it out as text) keeps it, as the plain
        transcript keeps "\\nUser:"."""
        return self.reply_end.rstrip()

    @property
    def stop(self) -> tuple[str, ...]:
        """The turn markers a reply must not run on into: the next user turn's opening,
        the user's label alone (what the first turn and every later one end their lead
        with), and the assistant's (a made-up turn of its own). A model whose end of turn
        is not an end-of-generation token writes one of them instead. Empty ones (a
        template without markers) are nothing to stop on."""
        user_label = os.path.commonprefix([self.head[::-1], self.reply_end[::-1]])[::-1].strip()
        labels = (self.turn_opening, user_label, self.generation_prompt.strip())
        return tuple(dict.fromkeys(label for label in labels if label))

    def render_turn(self, user_text: str, first: bool, opened: bool = False) -> str:
        """The text a new user turn adds to the tape, ending where the model writes;
        `opened`: the tape already ends with the turn's opening."""
        if first:
            lead = self.head
        elif opened:
            lead = self.reply_end[len(self.turn_opening):]
        else:
            lead = self.reply_end
        # Stripped as in the plain transcript: whitespace around a message is not part of it.
        return f"{lead}{user_text.strip()}{self.generation_prompt}"


TurnFormat = ChatFormat | TemplateFormat


class ChatTemplateError(EffctxError):
    """A chat template refused a conversation or cannot be used turn by turn."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def failure_reason(exc: BaseException) -> str:
    """One line on why a template failed: its own message when it refused
    (raise_exception), else the error's type and message (a template is untrusted code,
    anything can go wrong in it)."""
    return str(exc) if isinstance(exc, ChatTemplateError) else f"{type(exc).__name__}: {_one_line(str(exc))}"


def _raise_exception(message: str) -> None:
    # Templates call raise_exception("...") to refuse a conversation (no system role,
    # roles that do not alternate); the message becomes the fallback's reason.
    raise ChatTemplateError(_one_line(str(message)))


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML, which would change every tool
    # schema a template writes; templates are written against Transformers' filter.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class _GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %} renders its body: Transformers uses the tag to
    mark the assistant's tokens for training masks, which a prompt has no use for."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> list[jinja2.nodes.Node]:
        next(parser.stream)  # the tag's name
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


# As llama-cpp-python's Jinja2ChatFormatter and Transformers render chat templates: a
# sandbox (a template is data from the model file, and must not reach Python objects),
# trim_blocks and lstrip_blocks, {% break %}/{% continue %}, {% generation %},
# raise_exception, strftime_now and their tojson.
_ENVIRONMENT = ImmutableSandboxedEnvironment(
    loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True,
    extensions=[jinja2.ext.loopcontrols, _GenerationTag],
)
_ENVIRONMENT.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
_ENVIRONMENT.filters["tojson"] = _tojson


@functools.lru_cache(maxsize=16)
def compile_template(source: str) -> jinja2.Template:
    """The template compiled in the sandbox, once per source: the endpoint renders it for
    every request, and every prefix of a request for its segment map."""
    return _ENVIRONMENT.from_string(source)


# Message contents no template writes by itself, to find where the real contents go.
_USER_1 = "\ue000effctx-user-1\ue000"
_REPLY_1 = "\ue000effctx-reply-1\ue000"
_USER_2 = "\ue000effctx-user-2\ue000"
# Stands for a BOS/EOS token whose text the caller did not give: it may only be where
# the tokenizer adds BOS itself, anywhere else the format cannot be written.
_UNKNOWN_TOKEN = "\ue000effctx-unknown-token\ue000"


def _render(template: jinja2.Template, messages: list[dict[str, str]], bos: str, eos: str) -> str:
    return template.render(messages=messages, add_generation_prompt=True, bos_token=bos, eos_token=eos,
                           tools=None, documents=None)


def _split_at(text: str, sentinel: str) -> tuple[str, str]:
    if text.count(sentinel) != 1:
        raise ChatTemplateError("it does not write each message's content once, as it is")
    before, _, after = text.partition(sentinel)
    return before, after


def _derive(source: str, bos: str, eos: str, add_bos: bool) -> TemplateFormat:
    """Cut the template into turn pieces by rendering [user] and [user, assistant, user]
    with sentinel contents; ChatTemplateError (or whatever the template raises) when
    the pieces do not add up to what the template renders for the whole conversation."""
    template = _ENVIRONMENT.from_string(source)
    user_1 = {"role": "user", "content": _USER_1}
    one = _render(template, [user_1], bos, eos)
    three = _render(template, [user_1, {"role": "assistant", "content": _REPLY_1},
                               {"role": "user", "content": _USER_2}], bos, eos)
    head, generation_prompt = _split_at(one, _USER_1)
    if not generation_prompt.strip():
        raise ChatTemplateError("it writes no generation prompt after the user's message")
    first, rest = _split_at(three, _USER_1)
    before_reply, rest = _split_at(rest, _REPLY_1)
    reply_end, last = _split_at(rest, _USER_2)
    # The tape holds the first turn as it was appended, so the template must render it
    # the same once the conversation goes on; a reply may begin with whitespace that the
    # model writes itself (Llama 2 puts a space after [/INST]).
    extra = before_reply.removeprefix(generation_prompt)
    if first != head or not before_reply.startswith(generation_prompt) or (extra and not extra.isspace()) \
            or last != generation_prompt:
        raise ChatTemplateError("it renders earlier turns differently from how they were prompted")
    # The engine asks the tokenizer for BOS on the first turn when the model adds one, so
    # a template that writes BOS itself would make it twice. Only this leading BOS goes:
    # one the template writes between turns (Llama 2's <s>[INST]) is the model's format.
    if add_bos and bos and head.startswith(bos):
        head = head[len(bos):]
    if any(_UNKNOWN_TOKEN in piece for piece in (head, generation_prompt, reply_end)):
        raise ChatTemplateError("it writes the BOS or EOS token, whose text is not known")
    return TemplateFormat(hashlib.sha256(source.encode("utf-8")).hexdigest(), head, generation_prompt, reply_end)


@functools.lru_cache(maxsize=16)
def _template_report(source: str, bos: str, eos: str, add_bos: bool) -> tuple[TurnFormat, str]:
    # Cached per template and token texts: the template is compiled and cut once, and a
    # turn is string concatenation. (A template that shows strftime_now shows the time of
    # this first call.)
    try:
        fmt = _derive(source, bos, eos, add_bos)
    except Exception as exc:  # noqa: BLE001 - the template is untrusted code: any failure means "not usable"
        return PLAIN_TRANSCRIPT, f"the model's chat template is not used ({failure_reason(exc)}); {PLAIN_TRANSCRIPT.name}"
    return fmt, f"the model's chat template ({fmt.identity})"


def _token_text(token_id: int | None, token_text: Mapping[int, str] | None) -> str:
    if token_id is None:
        return ""  # the model has no such token: the template writes nothing for it
    if token_text is None or token_id not in token_text:
        return _UNKNOWN_TOKEN
    return token_text[token_id]


def chat_format_report(facts: ModelFacts, token_text: Mapping[int, str] | None = None) -> tuple[TurnFormat, str]:
    """The format for the model's turns and one line on why it is that one.

    `token_text` maps token ids to their text in the vocabulary (for the BOS and EOS
    ids), which templates write as `bos_token`/`eos_token`. Without it, a template that
    writes them anywhere but the leading BOS the tokenizer adds is not used.
    """
    if facts.chat_template is None:
        return PLAIN_TRANSCRIPT, f"no chat template in the model; {PLAIN_TRANSCRIPT.name}"
    if token_text is None:  # the texts the backend read from the model's vocabulary
        token_text = {i: t for i, t in ((facts.bos_token_id, facts.bos_text), (facts.eos_token_id, facts.eos_text))
                      if i is not None and t is not None}
    return _template_report(facts.chat_template, _token_text(facts.bos_token_id, token_text),
                            _token_text(facts.eos_token_id, token_text), facts.add_bos)


def chat_format_for(facts: ModelFacts, token_text: Mapping[int, str] | None = None) -> TurnFormat:
    """The format for the model's turns (see chat_format_report)."""
    return chat_format_report(facts, token_text)[0]
