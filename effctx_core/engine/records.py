"""What the engine's operations return, and how they report being cancelled."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from effctx_core.errors import Cancelled

if TYPE_CHECKING:
    import numpy as np


class PrefillCancelled(Cancelled):
    def __init__(self, done: int, total: int):
        self.done, self.total = done, total
        super().__init__(f"prefill cancelled after {done} of {total} tokens")


class SwapCancelled(Cancelled):
    """A swap's recompute was cancelled: the new cell is closed, the old one kept."""


@dataclass(frozen=True)
class NodeRestore:
    node: str
    mode: str  # "exact" (its saved state) or "recompute" (its tokens prefilled again)
    tokens: int
    recomputed: int  # tokens prefilled to get there
    ms: float
    reason: str


@dataclass(frozen=True)
class SwapResult:
    old_profile: str
    new_profile: str
    mode: str  # "exact" (state carried over) or "recompute" (the tape prefilled again)
    tokens: int
    recomputed: int
    ms: float
    reason: str  # why it was exact or recomputed, in a few words (events/explain.py)
    details: str = ""  # the runtime-identity fields that differ, for who asks


@dataclass(frozen=True)
class PrefixLoad:
    """How a stable prefix became resident: restored from the prefix cache or prefilled."""

    # "hit" (all restored), "partial" (the longest stored prefix restored, the rest
    # prefilled), "miss", "off", or "recompute" (a restore would cost more than the prefill)
    cache: str
    tokens: int
    ms: float
    key: str | None  # the entry that now holds the whole prefix, if any
    message: str | None  # one line: a refused cache entry, or a cache that could not be written
    restored: int = 0  # tokens restored from the cache (all of them on a hit)

    @property
    def computed(self) -> int:
        return self.tokens - self.restored


@dataclass(frozen=True)
class ScoreResult:
    """A text prefilled as a new conversation under the running cell's cache types and
    residency policy, each token scored by the model as it went in (teacher forcing)."""

    policy: str  # the residency policy that ran
    tokens: int  # tokens prefilled, BOS included
    scored: int  # tokens with a log-probability: all but a first one with nothing before it
    mean_nll: float  # -mean(logprobs) over the scored tokens, in nats; NaN when none was
    ms: float
    evicted: int  # tokens the policy took out of the cache during the run, evicted or parked
    # log p(token | the tokens before it), float64, one per token; NaN for the first.
    # Not compared: == on arrays gives an array, which a dataclass's == cannot use.
    logprobs: np.ndarray = field(compare=False)
