"""The requests the endpoint takes, as typed models: a bad request is refused naming its field.

Every model forbids fields it does not declare: a field effctx does not implement is
refused, never silently ignored (a client that asks for `frequency_penalty` 0.5 must not
believe it got it). Fields that change nothing at their neutral value (`n` 1, penalties
0, an empty `logit_bias`) are accepted at that value only.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# OpenAI's limit on top_logprobs; llama-server's n_probs takes the same.
MAX_TOP_LOGPROBS = 20


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextPart(_Strict):
    type: Literal["text"]
    text: str


Content = Union[str, list[TextPart]]


def content_text(content: Content | None) -> str | None:
    """A message's content as one string (text parts joined as OpenAI joins them)."""
    if content is None or isinstance(content, str):
        return content
    return "".join(part.text for part in content)


class FunctionCall(_Strict):
    name: str
    arguments: str  # a JSON document, as a string


class ToolCallIn(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class SystemMessage(_Strict):
    role: Literal["system", "developer"]
    content: Content
    name: str | None = None


class UserMessage(_Strict):
    role: Literal["user"]
    content: Content
    name: str | None = None


class AssistantMessage(_Strict):
    role: Literal["assistant"]
    content: Content | None = None
    tool_calls: list[ToolCallIn] | None = None
    name: str | None = None
    # What the SDK's own message object carries when a client appends it as it came back.
    refusal: None = None
    audio: None = None
    function_call: None = None
    annotations: list[Any] | None = None

    @field_validator("annotations")
    @classmethod
    def _no_annotations(cls, value: list[Any] | None) -> list[Any] | None:
        if value:
            raise ValueError("annotations are not supported")
        return value


class ToolMessage(_Strict):
    role: Literal["tool"]
    content: Content
    tool_call_id: str


Message = Annotated[Union[SystemMessage, UserMessage, AssistantMessage, ToolMessage], Field(discriminator="role")]


class FunctionDef(_Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Strict):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(_Strict):
    name: str
    description: str | None = None
    # `schema` shadows a BaseModel attribute, hence the alias.
    schema_: Annotated[dict[str, Any], Field(alias="schema")] = {}
    strict: bool | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_when_asked(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("json_schema is required with type json_schema, and only with it")
        return self


class StreamOptions(_Strict):
    include_usage: bool = False


def _neutral(name: str, value: Any, neutral: tuple[Any, ...]) -> Any:
    if value not in neutral:
        raise ValueError(f"{name} {value!r} is not supported (only {neutral[0]!r})")
    return value


class _Sampling(_Strict):
    """What chat and text completions share."""

    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | Annotated[list[str], Field(max_length=16)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    seed: int | None = None
    n: int | None = None
    user: str | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None

    @field_validator("n")
    @classmethod
    def _one_choice(cls, value: int | None) -> int | None:
        return _neutral("n", value, (1, None))

    @field_validator("frequency_penalty", "presence_penalty")
    @classmethod
    def _no_penalty(cls, value: float | None) -> float | None:
        if value not in (0, None):
            raise ValueError(f"penalty {value} is not supported (only 0)")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _no_bias(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value:
            raise ValueError("logit_bias is not supported (only an empty one)")
        return value

    @model_validator(mode="after")
    def _options_with_stream(self) -> _Sampling:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed with stream true")
        return self

    @property
    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(s for s in self.stop if s)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class ChatCompletionRequest(_Sampling):
    messages: Annotated[list[Message], Field(min_length=1)]
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    max_tokens: Annotated[int, Field(ge=0)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=0)] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    response_format: ResponseFormat | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    # A client's key for its conversation (OpenAI's prompt-cache routing hint): recorded.
    prompt_cache_key: str | None = None

    @field_validator("store")
    @classmethod
    def _not_stored(cls, value: bool | None) -> bool | None:
        return _neutral("store", value, (False, None))

    @model_validator(mode="after")
    def _consistent(self) -> ChatCompletionRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs true")
        if self.tool_choice not in (None, "none", "auto") and not self.tools:
            raise ValueError("tool_choice requires tools")
        if isinstance(self.tool_choice, NamedToolChoice) and self.tools and \
                self.tool_choice.function.name not in {t.function.name for t in self.tools}:
            raise ValueError(f"tool_choice names {self.tool_choice.function.name!r}, which is not in tools")
        return self

    @property
    def reply_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(_Sampling):
    prompt: str | Annotated[list[str], Field(min_length=1, max_length=1)] | Annotated[list[int], Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=0)] | None = 16  # OpenAI's default for completions
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = None

    @field_validator("echo")
    @classmethod
    def _no_echo(cls, value: bool | None) -> bool | None:
        return _neutral("echo", value, (False, None))

    @field_validator("suffix")
    @classmethod
    def _no_suffix(cls, value: str | None) -> str | None:
        return _neutral("suffix", value, (None,))

    @field_validator("best_of")
    @classmethod
    def _one_best(cls, value: int | None) -> int | None:
        return _neutral("best_of", value, (1, None))


class ConsoleTurnRequest(_Strict):
    """A console's turn on the watched engine (effctx's own route, api/console_turns.py)."""

    text: Annotated[str, Field(min_length=1)]
    # The node the turn goes on from; None: a new conversation.
    node: str | None = None
    max_tokens: Annotated[int, Field(ge=1)] = 256


class NodeRestoreRequest(_Strict):
    node: str


# Names pydantic puts into an error's location for a union member or a discriminator tag:
# not fields, so not part of the parameter a client sent.
_TYPE_NAMES = {"str", "int", "float", "bool", "list", "dict", "none", "system", "developer", "user", "assistant",
               "tool"}
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def param_of(loc: tuple[int | str, ...]) -> str | None:
    """The request parameter an error's location names, as a dotted path
    (`messages.2.content`), without the body prefix and union member names."""
    parts = [str(p) for p in loc[1:] if isinstance(p, int) or (_FIELD.match(p) and p not in _TYPE_NAMES)]
    return ".".join(parts) or None
