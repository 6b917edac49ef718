"""What a residency plan or executor says about the tape, in tokens and ranges."""

from __future__ import annotations

from dataclasses import dataclass

from effctx_core.contract import MODELED as MODELED
from effctx_core.contract import OBSERVED as OBSERVED
from effctx_core.residency.blocks import BlockClass, BlockTable

# A replay of a trace recorded before SessionOpened said which the map was.
UNKNOWN = "unknown"


@dataclass(frozen=True)
class ResidencyReport:
    policy: str
    source: str
    n_tokens: int
    sink_tokens: int
    recent_tokens: int
    hot_tokens: int
    cold_tokens: int
    evicted_tokens: int
    budget: int | None
    evicted_ranges: tuple[tuple[int, int], ...]
    cold_ranges: tuple[tuple[int, int], ...]

    @property
    def resident_tokens(self) -> int:
        return self.sink_tokens + self.recent_tokens + self.hot_tokens

    @property
    def over_budget(self) -> bool:
        return self.budget is not None and self.resident_tokens > self.budget

    @classmethod
    def from_table(cls, table: BlockTable, policy: str, source: str, budget: int | None) -> "ResidencyReport":
        return cls(
            policy=policy,
            source=source,
            n_tokens=table.n_tokens,
            sink_tokens=table.tokens_in(BlockClass.SINK),
            recent_tokens=table.tokens_in(BlockClass.RECENT),
            hot_tokens=table.tokens_in(BlockClass.HOT),
            cold_tokens=table.tokens_in(BlockClass.COLD),
            evicted_tokens=table.tokens_in(BlockClass.EVICTED),
            budget=budget,
            evicted_ranges=tuple(table.ranges_of(BlockClass.EVICTED)),
            cold_ranges=tuple(table.ranges_of(BlockClass.COLD)),
        )

    def to_dict(self) -> dict:
        return {
            "policy": self.policy,
            "source": self.source,
            "n_tokens": self.n_tokens,
            "sink_tokens": self.sink_tokens,
            "recent_tokens": self.recent_tokens,
            "hot_tokens": self.hot_tokens,
            "cold_tokens": self.cold_tokens,
            "evicted_tokens": self.evicted_tokens,
            "resident_tokens": self.resident_tokens,
            "budget": self.budget,
            "over_budget": self.over_budget,
            "evicted_ranges": [list(r) for r in self.evicted_ranges],
            "cold_ranges": [list(r) for r in self.cold_ranges],
        }
