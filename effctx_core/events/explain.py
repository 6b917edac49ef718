"""Structured causes as sentences: the one place a view (the console, the CLI, the
timeline, a trace) gets the words for what the contract and the engine report."""

from __future__ import annotations

from typing import Protocol

from effctx_core.contract import PrefixCause, PrefixStatus
from effctx_core.events.trace import NodeRestored, PrefixCacheLookup, PrefixChecked


def describe_prefix(cause: PrefixCause, diverged_at: int | None, rollback_floor: int | None) -> str:
    """The one sentence for a prefix check."""
    if cause is PrefixCause.DIVERGED:
        return f"diverges from the resident tape at token {diverged_at}"
    if cause is PrefixCause.ROLLBACK_LIMIT:
        return (f"rollback limit: the cache can be cut back to {rollback_floor} tokens at the earliest, "
                f"the prefix diverges at {diverged_at}; re-prefilled from the start")
    return {
        PrefixCause.EMPTY: "empty cache",
        PrefixCause.IDENTICAL: "identical to the resident tape",
        PrefixCause.EXTENDS: "extends the resident tape",
        PrefixCause.RESTORED: "restored by the backend from a state it kept",
    }[cause]


def prefix_sentence(status: PrefixStatus) -> str:
    """describe_prefix of a PrefixStatus."""
    return describe_prefix(status.cause, status.diverged_at, status.rollback_floor)


# Why a turn computed what it computed; the first that applies wins (see `turn_cause`).
ROLLBACK_LIMIT = "rollback limit"
NEW_CONVERSATION = "new conversation"
EDIT = "edit inside the earlier turns"
TAIL_DROPPED = "cache tail dropped"
RESTORED = "restored another node"
PREFIX_CACHE = "prefix cache"  # shown as "prefix cache hit", "… miss" or "… off"
CACHE_BEHIND = "cache behind the tape"
FIRST_TURN = "empty cache"
ALL_REUSED = "everything reused"


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


def turn_cause(r: TurnFacts) -> tuple[str, str]:
    """The reason a turn computed what it did, and one sentence with the numbers.

    What happened to the cache in this turn's ensure_prefix comes first; what happened
    between turns (a restore, a prefix cache load) explains a turn that reused everything."""
    check = r.check
    assert check is not None
    new = r.computed - check.prefilled  # the input; `computed` includes the re-prefilled tape
    tail = f"{r.reused:,} reused, {r.computed:,} computed"
    at = r.diverged_at if r.diverged_at is not None else check.reused
    if check.cause == PrefixCause.ROLLBACK_LIMIT.value:
        floor = check.rollback_floor
        earliest = f" (the earliest cut is token {floor:,})" if floor is not None else ""
        return ROLLBACK_LIMIT, (
            f"diverged at token {at:,}, before the cache can be cut back{earliest}: "
            f"{check.dropped:,} dropped and the whole tape re-prefilled; {tail}"
        )
    if check.dropped and r.prefix_tokens == 0:
        return NEW_CONVERSATION, f"the {check.dropped:,} resident tokens were dropped; {r.computed:,} computed"
    if check.dropped and check.reused < r.prefix_tokens:
        return EDIT, (
            f"the prompt diverged from the resident tape at token {at:,}: {check.dropped:,} dropped, "
            f"{check.prefilled:,} earlier tokens re-prefilled and {new:,} new computed; {r.reused:,} reused"
        )
    if check.dropped:
        return TAIL_DROPPED, (
            f"the cache held {check.dropped:,} tokens past the tape (a stop text or the end of a stopped reply), "
            f"dropped; {tail}"
        )
    if r.restore is not None:
        x = r.restore
        return RESTORED, (
            f"node {x.node} was restored before this turn ({x.mode}, {x.recomputed:,} of {x.tokens:,} tokens "
            f"recomputed in {x.ms:,.1f} ms: {x.reason}); then {tail}"
        )
    if check.prefilled:
        return CACHE_BEHIND, (
            f"the cache held {check.reused:,} of the {r.prefix_tokens:,} tape tokens: {check.prefilled:,} re-prefilled "
            f"and {new:,} new computed"
        )
    if r.cache_lookup is not None:
        c = r.cache_lookup
        how = {"hit": "restored from the prefix cache", "miss": "prefilled and stored", "off": "prefilled, no cache",
               "recompute": "prefilled: a restore costs more than a prefill on this cell"}
        note = f" ({c.message})" if c.message else ""
        return f"{PREFIX_CACHE} {c.result}", (
            f"the stable prefix of {c.tokens:,} tokens was {how.get(c.result, c.result)} in {c.ms:,.1f} ms{note}; "
            f"then {tail}"
        )
    if r.prefix_tokens == 0:
        return FIRST_TURN, f"nothing was resident: all {r.computed:,} tokens computed"
    return ALL_REUSED, f"all {r.reused:,} resident tokens reused; only the {new:,} new tokens computed"
