"""Structured causes as sentences: the words for what the engine reports of a turn (why it
reused what it reused), for every view (the console, the CLI, the timeline, a trace).
A prefix check's own sentence is the contract's (PrefixStatus.reason, describe_prefix)."""

from __future__ import annotations

from typing import Protocol

from effctx_core.contract import PrefixCause
from effctx_core.events.trace import NodeRestored, PrefixCacheLookup, PrefixChecked, RequestRouted
from effctx_core.units import format_count, format_counted, format_ms

# Why a turn computed what it computed; the first that applies wins (see `turn_cause`).
ROLLBACK_LIMIT = "rollback limit"
NEW_CONVERSATION = "new conversation"
EDIT = "edit inside the earlier turns"
TAIL_DROPPED = "cache tail dropped"
RESTORED = "restored another node"
PREFIX_CACHE = "prefix cache"  # shown as "prefix cache hit", "… miss" or "… off"
CACHE_BEHIND = "cache behind the tape"
FIRST_TURN = "empty cache"
EXTENDS = "extends the resident tape"
REQUEST_RESTORED = "request restored its state"
REQUEST_SHARED = "request shared the tape's start"


class TurnFacts(Protocol):
    """What the timeline knows of a turn that explains it (events/timeline.py TurnRecord)."""

    @property
    def check(self) -> PrefixChecked | None: ...

    @property
    def restore(self) -> NodeRestored | None: ...

    @property
    def cache_lookup(self) -> PrefixCacheLookup | None: ...

    @property
    def prefix_tokens(self) -> int: ...

    @property
    def reused(self) -> int: ...

    @property
    def computed(self) -> int: ...

    @property
    def diverged_at(self) -> int | None: ...

    @property
    def request(self) -> RequestRouted | None: ...


def turn_cause(r: TurnFacts) -> tuple[str, str]:
    """The reason a turn computed what it did, and one sentence with the numbers.

    What happened to the cache in this turn's ensure_prefix comes first; what happened
    between turns (a restore, a prefix cache load) explains a turn that reused everything."""
    check = r.check
    assert check is not None
    new = r.computed - check.prefilled  # the input; `computed` includes the re-prefilled tape
    count = format_count
    tail = f"{count(r.reused)} reused, {count(r.computed)} computed"
    at = r.diverged_at if r.diverged_at is not None else check.reused
    limited = check.cause in (PrefixCause.ROLLBACK_LIMIT.value, PrefixCause.RESTORED.value)
    if r.request is not None and not limited:
        return _request_cause(r.request, check, tail)
    if limited:
        floor = check.rollback_floor
        earliest = f" (the earliest cut is token {count(floor)})" if floor is not None else ""
        if check.cause == PrefixCause.RESTORED.value:
            return ROLLBACK_LIMIT, (
                f"diverged at token {count(at)}, before the cache can be cut back{earliest}: restarted from the "
                f"state the backend kept at token {count(check.reused)}, {count(check.dropped)} dropped and "
                f"{count(check.prefilled)} re-prefilled; {tail}"
            )
        return ROLLBACK_LIMIT, (
            f"diverged at token {count(at)}, before the cache can be cut back{earliest}: "
            f"{count(check.dropped)} dropped and the whole tape re-prefilled; {tail}"
        )
    if check.dropped and r.prefix_tokens == 0:
        were = "was" if check.dropped == 1 else "were"
        return NEW_CONVERSATION, (
            f"the {format_counted(check.dropped, 'resident token')} {were} dropped; {count(r.computed)} computed")
    if check.dropped and check.reused < r.prefix_tokens:
        return EDIT, (
            f"the prompt diverged from the resident tape at token {count(at)}: {count(check.dropped)} dropped, "
            f"{format_counted(check.prefilled, 'earlier token')} re-prefilled and {count(new)} new computed; "
            f"{count(r.reused)} reused"
        )
    if check.dropped:
        return TAIL_DROPPED, (
            f"the cache held {format_counted(check.dropped, 'token')} past the tape (a stop text or the end of a "
            f"stopped reply), dropped; {tail}"
        )
    if r.restore is not None:
        x = r.restore
        return RESTORED, (
            f"node {x.node} was restored before this turn ({x.mode}, {count(x.recomputed)} of "
            f"{format_counted(x.tokens, 'token')} recomputed in {format_ms(x.ms)}: {x.reason}); then {tail}"
        )
    if check.prefilled:
        return CACHE_BEHIND, (
            f"the cache held {count(check.reused)} of the {format_counted(r.prefix_tokens, 'tape token')}: "
            f"{count(check.prefilled)} re-prefilled and {count(new)} new computed"
        )
    if r.cache_lookup is not None:
        c = r.cache_lookup
        how = {"hit": "restored from the prefix cache", "miss": "prefilled and stored", "off": "prefilled, no cache",
               "recompute": "prefilled: a restore costs more than a prefill on this cell",
               "partial": f"restored from the prefix cache up to token {count(c.restored)}, the rest prefilled and stored"}
        note = f" ({c.message})" if c.message else ""
        return f"{PREFIX_CACHE} {c.result}", (
            f"the stable prefix of {format_counted(c.tokens, 'token')} was {how.get(c.result, c.result)} in "
            f"{format_ms(c.ms)}{note}; then {tail}"
        )
    if r.prefix_tokens == 0:
        return FIRST_TURN, f"nothing was resident: {_all(r.computed, 'token')} computed"
    return EXTENDS, (f"{_all(r.reused, 'resident token')} reused; "
                     f"only the {format_counted(new, 'new token')} computed")


def _request_cause(q: RequestRouted, check: PrefixChecked, tail: str) -> tuple[str, str]:
    """A client's request brings its whole prompt: what it started from is its route, and
    what the resident tape held past the shared start was another conversation's (or an
    edited one's), not a dropped stop text."""
    count = format_count
    if q.route in ("restored", "prefix_cache"):
        where = f"node {q.node}'s state" if q.node else "a prefix-cache entry"
        return REQUEST_RESTORED, (f"the request started from {where}: {format_counted(q.shared, 'token')} restored "
                                  f"in {format_ms(q.ms)}; {tail}")
    if check.dropped:
        return REQUEST_SHARED, (f"the request shared {format_counted(check.reused, 'token')} with the resident tape "
                                f"and left it there: {count(check.dropped)} dropped; {tail}")
    if q.shared == 0:
        return FIRST_TURN, f"nothing of the request was resident: {_all(q.prompt_tokens, 'token')} computed"
    return EXTENDS, f"the request extends the resident tape: {tail}"


def _all(n: int, noun: str) -> str:
    """'all 13 tokens', but '1 token': "all" of one reads as a slip."""
    return format_counted(n, noun) if n == 1 else f"all {format_counted(n, noun)}"


# Why a swap recomputed: the first of these runtime-identity fields that differs (a name,
# or a prefix ending in a dot).
_IDENTITY_CHANGES = (
    ("backend", "another backend"),
    ("backend_version", "another backend version"),
    ("model_sha256", "another model"),
    ("kv_settings.", "other KV settings"),
    ("residency", "another residency policy"),
    ("prompt_template", "another prompt template"),
    ("add_bos", "another tokenizer policy"),
)


def identity_change(fields: list[str]) -> str:
    """What a swap between two runtime identities changed, in a few words, from the names
    of the fields that differ (RuntimeIdentity.differences)."""
    for prefix, words in _IDENTITY_CHANGES:
        if any(name == prefix or (prefix.endswith(".") and name.startswith(prefix)) for name in fields):
            return words
    return "another runtime identity"


class SwapFacts(Protocol):
    """What a swap reports of itself (CellSwapped, the engine's SwapResult)."""

    @property
    def new_profile(self) -> str: ...

    @property
    def mode(self) -> str: ...

    @property
    def recomputed(self) -> int: ...

    @property
    def ms(self) -> float: ...

    @property
    def reason(self) -> str: ...


def swap_sentence(swap: SwapFacts) -> str:
    """A swap in one line: why, and what it cost; the identity fields behind it are its
    details, for who asks."""
    how = "state carried over" if swap.mode == "exact" else f"recomputed {format_counted(swap.recomputed, 'token')}"
    return f"now on {swap.new_profile}: {how} in {format_ms(swap.ms)} ({swap.reason})"


def reset_sentence(evicts: bool) -> str:
    """What a new conversation (SessionEngine.reset) leaves for the next turn: the cache
    keeps the start the two conversations share (EngineState.take_left), except under an
    evicting policy, whose cache holds the old tape shifted."""
    if evicts:
        return "new conversation: the next turn drops what is resident"
    return "new conversation: the next turn keeps the start it shares with what is resident and drops the rest"
