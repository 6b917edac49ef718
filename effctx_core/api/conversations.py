"""Which conversation a request continues, and where and why its prompt left that
conversation's last request.

A client sends its whole conversation every time. Its requests form a conversation when
their messages extend one another; the system message does not count for the match, so a
system prompt that changes between requests (a timestamp, an edited instruction) shows
up as a divergence of the same conversation instead of as a new one. What each request
was (its messages' hashes, its tools, its segments) is kept in its node of the snapshot
tree, so the match survives a restart of the endpoint.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Callable, Sequence

from effctx_core.backends.tape import common_prefix_length
from effctx_core.snapshots.tree import Node, SnapshotTree

# Tokens shown on each side of a divergence: enough to recognise the text around it.
SIDE_TOKENS = 12


def digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]


def message_hash(message: dict) -> str:
    """What identifies a message: its role, text and tool calls (not the call ids, which
    some clients regenerate; not its name)."""
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or ()]
    return digest([message["role"], message.get("content") or "", calls])


@dataclass(frozen=True)
class PromptSegment:
    """A token range of the prompt: the system prompt, the tool schemas, one message, or
    the generation prompt."""

    label: str  # "system", "tools", "message 3 (tool)", "generation prompt"
    index: int | None  # the message's index in the request
    role: str | None
    start: int
    end: int

    def to_json(self) -> list:
        return [self.label, self.index, self.role, self.start, self.end]

    @classmethod
    def from_json(cls, row: list) -> PromptSegment:
        return cls(str(row[0]), row[1], row[2], int(row[3]), int(row[4]))


def segment_at(segments: Sequence[PromptSegment], token: int) -> PromptSegment | None:
    for seg in segments:
        if seg.start <= token < seg.end:
            return seg
    return segments[-1] if segments and token >= segments[-1].end else None


@dataclass(frozen=True)
class RequestFacts:
    """What a request was, as its node records it."""

    messages: tuple[str, ...]  # message hashes, in order
    roles: tuple[str, ...]
    system: str  # hash of the system messages
    tools: str  # hash of the tool list, in order
    tool_names: tuple[str, ...]
    tool_schemas: tuple[str, ...]  # hash of each tool, in order
    template: str  # the format's identity
    stamps_date: bool
    segments: tuple[PromptSegment, ...]
    cache_key: str | None = None  # the client's prompt_cache_key

    def metrics(self, conversation: str, request_id: str, reply: str) -> dict:
        return {
            "request": request_id, "conversation": conversation, "messages": list(self.messages),
            "roles": list(self.roles),
            "reply_message": reply, "system": self.system, "tools": self.tools, "tool_names": list(self.tool_names),
            "tool_schemas": list(self.tool_schemas), "template": self.template, "stamps_date": self.stamps_date,
            "segments": [s.to_json() for s in self.segments], "cache_key": self.cache_key,
        }


def request_facts(messages: Sequence[dict], tools: Sequence[dict], template: str, stamps_date: bool,
                  segments: Sequence[PromptSegment], cache_key: str | None) -> RequestFacts:
    return RequestFacts(
        messages=tuple(message_hash(m) for m in messages),
        roles=tuple(m["role"] for m in messages),
        system=digest([m.get("content") for m in messages if m["role"] == "system"]),
        tools=digest(list(tools)),
        tool_names=tuple(t["function"]["name"] for t in tools),
        tool_schemas=tuple(digest(t) for t in tools),
        template=template, stamps_date=stamps_date, segments=tuple(segments), cache_key=cache_key,
    )


@dataclass(frozen=True)
class Earlier:
    """The request a new one continues: its node and what it was."""

    node: Node
    conversation: str
    messages: tuple[str, ...]  # its messages and its reply, which a continuation resends
    roles: tuple[str, ...]
    system: str
    tools: str
    tool_names: tuple[str, ...]
    tool_schemas: tuple[str, ...]
    template: str


def _earlier(node: Node) -> Earlier | None:
    m = node.metrics or {}
    if "conversation" not in m:
        return None
    return Earlier(node, m["conversation"], tuple(m.get("messages", ())) + (m.get("reply_message", ""),),
                   tuple(m.get("roles", ())) + ("assistant",),
                   m.get("system", ""), m.get("tools", ""), tuple(m.get("tool_names", ())),
                   tuple(m.get("tool_schemas", ())), m.get("template", ""))


def _non_system(hashes: Sequence[str], roles: Sequence[str]) -> list[str]:
    return [h for h, r in zip(hashes, roles) if r != "system"]


def find_conversation(tree: SnapshotTree, facts: RequestFacts,
                      tokens: Sequence[int]) -> tuple[str, Earlier | None]:
    """The conversation this request continues and its request that the prompt shares
    most with; a new conversation id when none matches."""
    requests = [e for n in tree if (e := _earlier(n)) is not None]
    shared = tree.shared_with(tokens) if requests else {}
    if facts.cache_key is not None:
        keyed = [e for e in requests if (e.node.metrics or {}).get("cache_key") == facts.cache_key]
        if keyed:
            return keyed[-1].conversation, max(keyed, key=lambda e: _score(e, facts, shared))
    # The same conversation: its first messages are the same, or the prompt follows it
    # into its first message (an edit there, not a new conversation).
    first = next((g.start for g in facts.segments if g.index is not None and g.role != "system"), len(tokens))
    best, best_score = None, (0, 0, 0.0)
    for e in requests:
        score = _score(e, facts, shared)
        if (score[0] > 0 or score[1] > first) and score > best_score:
            best, best_score = e, score
    if best is not None:
        return best.conversation, best
    taken = {e.conversation for e in requests}
    n = len(taken) + 1
    while f"c{n}" in taken:
        n += 1
    return f"c{n}", None


def _score(e: Earlier, facts: RequestFacts, shared_tokens: dict[str, int]) -> tuple[int, int, float]:
    """Leading non-system messages shared, then prompt tokens shared (SnapshotTree.shared_with),
    then recency."""
    mine = _non_system(facts.messages, facts.roles)
    theirs = _non_system(e.messages, e.roles)
    shared = 0
    for a, b in zip(mine, theirs):
        if a != b:
            break
        shared += 1
    return shared, shared_tokens[e.node.id], e.node.created


@dataclass(frozen=True)
class Divergence:
    """Where the prompt stopped following what the conversation's last request held
    (its prompt and its reply), and the change that did it."""

    kind: str  # see CAUSES
    at: int | None  # token index; None when the prompt extends it
    segment: PromptSegment | None
    offset: int | None  # tokens into that segment
    stored: str  # text around the divergence, as the earlier request had it
    prompt: str  # and as this prompt has it
    detail: str  # the tools that changed, the message edited...
    against: str | None  # the node compared with
    # Where a resent reply's tokens differed from the model's own, which were kept instead.
    retokenized_at: int | None = None

    def to_json(self) -> dict:
        seg = self.segment
        return {
            "kind": self.kind, "at": self.at, "against": self.against, "detail": self.detail,
            "retokenized_at": self.retokenized_at,
            "sentence": divergence_sentence(self),
            "segment": None if seg is None else {"label": seg.label, "index": seg.index, "role": seg.role,
                                                 "offset": self.offset},
            "sides": {"stored": self.stored, "prompt": self.prompt},
        }


CAUSES = {
    "new_conversation": "a new conversation: no earlier request shares its messages",
    "appended": "appended messages only: everything before them was reused",
    "system_changed": "the system prompt changed",
    "date_changed": "a date or time in the prompt changed",
    "tools_changed": "the tool list changed",
    "history_edited": "an earlier message was edited",
    "rerendered": "the template rendered an earlier message differently",
    "retokenized": "an earlier reply was tokenized differently when it was sent back",
    "template_changed": "the chat template changed",
    "messages_removed": "the prompt holds fewer messages than the conversation had",
}

# Digit runs joined by date and time separators: 2026-12-05, 17:03:22, 05/12/2026 12:00.
_STAMP = re.compile(r"\d{1,4}(?:[-/:. T]\d{1,4})+")


def _looks_like_stamp(a: str, b: str) -> bool:
    """Both sides differ inside a date or time: the changed characters sit in stamps."""
    sa, sb = _STAMP.findall(a), _STAMP.findall(b)
    return bool(sa) and bool(sb) and sa != sb


def _tool_change(earlier: Earlier, facts: RequestFacts) -> str:
    before, now = earlier.tool_names, facts.tool_names
    added = [n for n in now if n not in before]
    removed = [n for n in before if n not in now]
    if added or removed:
        parts = ([f"added {', '.join(added)}"] if added else []) + ([f"removed {', '.join(removed)}"] if removed else [])
        return "; ".join(parts)
    if list(before) != list(now) and sorted(before) == sorted(now):
        return f"reordered: {', '.join(before)} → {', '.join(now)}"
    changed = [n for n, a, b in zip(now, earlier.tool_schemas, facts.tool_schemas) if a != b]
    return f"schema of {', '.join(changed)} changed" if changed else "changed"


def diverge(earlier: Earlier | None, facts: RequestFacts, tokens: Sequence[int],
            tree: SnapshotTree, detokenize: Callable[[Sequence[int]], str]) -> Divergence:
    if earlier is None:
        return Divergence("new_conversation", None, None, None, "", "", "", None)
    stored = tree.tape(earlier.node.id)
    at = common_prefix_length(stored, tokens)
    node = earlier.node.id
    if at >= len(stored):
        return Divergence("appended", None, None, None, "", "", "", node)
    seg = segment_at(facts.segments, at)
    lo = max(0, at - SIDE_TOKENS)
    side_a, side_b = detokenize(stored[lo:at + SIDE_TOKENS]), detokenize(tokens[lo:at + SIDE_TOKENS])
    offset = None if seg is None else at - seg.start
    kind, detail = _kind(earlier, facts, seg, side_a, side_b, stored, tokens, at, detokenize)
    return Divergence(kind, at, seg, offset, side_a, side_b, detail, node)


def _kind(earlier: Earlier, facts: RequestFacts, seg: PromptSegment | None, side_a: str, side_b: str, stored: Sequence[int], tokens: Sequence[int], at: int,
          detokenize: Callable[[Sequence[int]], str]) -> tuple[str, str]:
    if earlier.template and facts.template != earlier.template:
        return "template_changed", f"{earlier.template} → {facts.template}"
    label = seg.label if seg is not None else ""
    if label == "tools" or (facts.tools != earlier.tools and label in ("system", "")):
        return "tools_changed", _tool_change(earlier, facts)
    if seg is not None and seg.role == "system" or label == "system":
        if _looks_like_stamp(side_a, side_b):
            return "date_changed", "the template stamps the date" if facts.stamps_date else ""
        return "system_changed", ""
    index = seg.index if seg is not None else None
    if index is None:
        if _looks_like_stamp(side_a, side_b):
            return "date_changed", "the template's date or time" if facts.stamps_date else ""
        return "rerendered", "outside the messages"
    if index >= len(earlier.messages):
        return "rerendered", ""
    if facts.messages[index] != earlier.messages[index]:
        return ("date_changed" if _looks_like_stamp(side_a, side_b) else "history_edited"), ""
    # The same message text, other tokens.
    assert seg is not None  # the index came from it
    if facts.roles[index] == "assistant" and detokenize(tokens[at:seg.end]).startswith(detokenize(stored[at:seg.end])):
        return "retokenized", ""
    return "rerendered", ""


def divergence_sentence(d: Divergence) -> str:
    base = CAUSES[d.kind]
    if d.at is None:
        return base + (f"; {d.detail}" if d.detail else "")
    where = f" at token {d.at:,}"
    if d.segment is not None:
        where += f", in {d.segment.label}, {d.offset:,} tokens in"
    return f"{base}{where}" + (f": {d.detail}" if d.detail else "")
