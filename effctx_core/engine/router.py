"""Where a request starts from: the cheapest of what the engine holds.

A request's prompt may share a start with the tape the session holds now (resident), with
a state the snapshot store keeps (a conversation's earlier reply, restored) or with
nothing (cold). Each way costs a prefill of the tokens it does not share, and a stored
state costs its restore besides; the router picks the cheapest by running estimates of
both rates measured in this process, so a slow disk or a fast prefill changes the choice.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Sequence


class RouteKind(enum.Enum):
    RESIDENT = "resident"  # the session's tape shares the prompt's start
    RESTORED = "restored"  # a conversation's stored state, restored
    PREFIX_CACHE = "prefix_cache"  # a prefix-cache entry, restored
    COLD = "cold"  # nothing shared: the whole prompt is prefilled


@dataclass(frozen=True)
class RouteOption:
    kind: RouteKind
    shared: int  # prompt tokens this route starts with
    state_bytes: int = 0  # what a restore reads; 0 for the resident tape
    key: str | None = None  # the store entry a restore reads


# Rates before anything was measured in this process: a state restores from the page
# cache at about half a gigabyte a second, and a small model prefills a few hundred
# tokens a second on a laptop CPU. Both are only the start: each measurement moves them.
SEED_PREFILL_TOKENS_PER_MS = 0.3
SEED_RESTORE_BYTES_PER_MS = 500_000.0
# The weight of a new measurement in the running estimate: recent enough to follow a
# change (another process taking the cores), steady enough to ignore one outlier.
NEW_WEIGHT = 0.3


class RouteCosts:
    """Running estimates of what a prefilled token and a restored byte cost."""

    def __init__(self, prefill_tokens_per_ms: float = SEED_PREFILL_TOKENS_PER_MS,
                 restore_bytes_per_ms: float = SEED_RESTORE_BYTES_PER_MS):
        self.prefill_tokens_per_ms = prefill_tokens_per_ms
        self.restore_bytes_per_ms = restore_bytes_per_ms

    def observe_prefill(self, tokens: int, ms: float) -> None:
        # A handful of tokens is dominated by fixed costs and says little about the rate.
        if tokens >= 32 and ms > 0:
            self.prefill_tokens_per_ms = _blend(self.prefill_tokens_per_ms, tokens / ms)

    def observe_restore(self, state_bytes: int, ms: float) -> None:
        if state_bytes > 0 and ms > 0:
            self.restore_bytes_per_ms = _blend(self.restore_bytes_per_ms, state_bytes / ms)

    def estimate_ms(self, option: RouteOption, prompt_tokens: int) -> float:
        prefill = (prompt_tokens - option.shared) / self.prefill_tokens_per_ms
        return prefill + option.state_bytes / self.restore_bytes_per_ms


def _blend(old: float, new: float) -> float:
    return (1 - NEW_WEIGHT) * old + NEW_WEIGHT * new


def choose_route(prompt_tokens: int, options: Sequence[RouteOption], costs: RouteCosts) -> RouteOption:
    """The option with the lowest estimated time to the prompt's end; on a tie the one
    that reads the fewest bytes (the resident tape first: it disturbs nothing)."""
    if not options:
        raise ValueError("no route to choose from")
    return min(options, key=lambda o: (costs.estimate_ms(o, prompt_tokens), o.state_bytes, o.kind is not RouteKind.RESIDENT))
