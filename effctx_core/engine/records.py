"""What the engine's operations return, and how they report being cancelled."""

from __future__ import annotations

from dataclasses import dataclass

from effctx_core.errors import Cancelled


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
    reason: str


@dataclass(frozen=True)
class PrefixLoad:
    """How a stable prefix became resident: restored from the prefix cache or prefilled."""

    cache: str  # "hit", "miss" or "off"
    tokens: int
    ms: float
    key: str | None
    message: str | None  # one line: a refused cache entry, or a cache that could not be written
