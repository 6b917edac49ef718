"""The records of a benchmark workload: what is sent, in which order, and how it is framed."""

from __future__ import annotations

from dataclasses import dataclass

from effctx_core.errors import EffctxError

ROLES = ("user", "tool")
MAX_REPLY_TOKENS = 2048


class WorkloadError(EffctxError):
    """A workload file is missing, not valid TOML, or breaks the workload schema."""


@dataclass(frozen=True)
class Turn:
    role: str  # "user" or "tool"
    text: str
    max_tokens: int  # reply budget, 1..MAX_REPLY_TOKENS
    # For questions: the reply is correct if it contains any of these, compared caseless
    # (str.casefold: "STRASSE" matches "straße", which str.lower does not).
    expect: tuple[str, ...] = ()

    def is_correct(self, reply: str) -> bool:
        """The one answer rule of workloads: the reply contains an expected answer, caseless."""
        folded = reply.casefold()
        return any(answer.casefold() in folded for answer in self.expect)

    def grade(self, reply: str) -> bool | None:
        """Whether the reply answers the turn's question, or None for a turn that asks none."""
        return self.is_correct(reply) if self.expect else None


@dataclass(frozen=True)
class Framing:
    """How messages become raw transcript text: workloads run as plain completion text, so
    every backend sees the same characters whatever chat template its model ships."""

    user: str = "\n\nUser: "
    tool: str = "\n\nTool result: "
    assistant: str = "\n\nAssistant:"
    # A reply that starts the next message has ended; decoding on would invent the other side.
    stop: tuple[str, ...] = ("\n\nUser:", "\n\nTool result:")

    def render(self, turn: Turn) -> str:
        opening = self.user if turn.role == "user" else self.tool
        return opening + turn.text.strip() + self.assistant


@dataclass(frozen=True)
class Edit:
    before_turn: int  # 1-based: the stable prefix is edited just before this turn runs
    find: str  # occurs exactly once in the prefix
    replace: str

    def apply(self, prefix: str) -> str:
        found = prefix.count(self.find)
        if found != 1:
            raise WorkloadError(f"edit.find must occur exactly once in the prefix (found {found} times)")
        return prefix.replace(self.find, self.replace, 1)


@dataclass(frozen=True)
class Branch:
    name: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    prefix: str  # the stable prefix: system prompt and tool definitions, or the document
    turns: tuple[Turn, ...]
    framing: Framing
    edit: Edit | None = None
    branch_after: int | None = None  # 1-based turn; each branch restores the state after its reply
    branches: tuple[Branch, ...] = ()
    digest: str = ""  # sha256 hex of the file's bytes: certificates record which workload ran
    source: str = ""  # where it was read from: "built-in" or the file's path
