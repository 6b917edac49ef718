"""Which entries leave when the store is over its budget: least recently used first.

Pure: typed index records, the keys saved trees reference and the numbers in, a plan out.
The store deletes the files and raises when a plan does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping

from effctx_core.snapshots.index import IndexRecord


@dataclass(frozen=True)
class EvictionPlan:
    victims: tuple[str, ...]  # least recently used first
    freed_bytes: int
    kept_bytes: int  # what the store holds after the victims go, `incoming` not counted
    incoming: int
    budget: int

    @property
    def fits(self) -> bool:
        return self.kept_bytes + self.incoming <= self.budget


def plan_eviction(records: Mapping[str, IndexRecord], referenced: Collection[str], incoming: int, budget: int,
                  keep: str | None = None) -> EvictionPlan:
    """Unreferenced entries, least recently used first (`use`, the index's logical clock),
    until `incoming` more bytes fit in `budget`. `keep` (the entry being written, which
    replaces itself) is neither counted nor evicted. A plan that cannot fit (referenced
    entries alone fill the budget) says so by `fits`."""
    kept = sum(r.bytes for k, r in records.items() if k != keep)
    victims: list[str] = []
    freed = 0
    if kept + incoming > budget:
        for key, record in sorted(records.items(), key=lambda kv: kv[1].use):
            if kept + incoming <= budget:
                break
            if key == keep or key in referenced:
                continue
            victims.append(key)
            kept -= record.bytes
            freed += record.bytes
    return EvictionPlan(tuple(victims), freed, kept, incoming, budget)
