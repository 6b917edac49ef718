"""The residency of one session's tape: segments, blocks, the policy's plan, and what
the cache must hold for the tape to be what the plan says.

The tracker is bookkeeping only; it never calls a backend. The engine asks it for a plan
and hands the plan to the backend's executor.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from effctx_core.contract import RuntimeEviction
from effctx_core.residency.blocks import BlockClass, BlockTable, Reason, Segment
from effctx_core.residency.config import ResidencyConfig, policy_evicts
from effctx_core.residency.modeled import modeled_table
from effctx_core.residency.policies import PlannerCaps, planner_for
from effctx_core.residency.report import MODELED, OBSERVED, ResidencyReport


@dataclass(frozen=True)
class SegmentRun:
    kind: Segment
    tokens: int
    turn: int


def segments_to_json(runs: Sequence[SegmentRun]) -> list[list]:
    """A segment map as a snapshot-tree node keeps it: [kind label, tokens, turn] runs."""
    return [[run.kind.label, run.tokens, run.turn] for run in runs]


def segments_from_json(raw: object, n_tokens: int) -> list[SegmentRun]:
    """The segment map a node kept for its `n_tokens` tape; one `other` run where it kept
    none (a node made before segments were kept) or one that does not cover the tape."""
    fallback = [SegmentRun(Segment.OTHER, n_tokens, 0)]
    if not isinstance(raw, list):
        return fallback
    names = {s.label: s for s in Segment}
    runs = []
    for item in raw:
        ok = (isinstance(item, list) and len(item) == 3 and item[0] in names
              and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in item[1:]))
        if not ok:
            return fallback
        runs.append(SegmentRun(names[item[0]], item[1], item[2]))
    return runs if sum(run.tokens for run in runs) == n_tokens else fallback


class ResidencyTracker:
    def __init__(self, config: ResidencyConfig, budget: int, caps: PlannerCaps,
                 runtime_eviction: RuntimeEviction | None = None, source: str = OBSERVED):
        """`source`: observed or modeled, as the backend says (effctx_core.cells.residency_source)."""
        self.config = config
        self.budget = budget
        self.caps = caps
        self.planner = planner_for(config, caps)
        # The runtime evicts by itself: the tape is tracked as given, and every view of it
        # is the map modeled from the runtime's settings.
        self.runtime_eviction = runtime_eviction
        # A map drawn by modeled_table is modeled, whatever the caller says.
        self.source = MODELED if runtime_eviction is not None else source
        self._segments: list[SegmentRun] = []
        self._table = BlockTable.empty()
        # The UI thread reads the table while a worker thread changes it.
        self._lock = threading.Lock()

    @property
    def policy(self) -> str:
        return self.planner.name if self.runtime_eviction is None else self.runtime_eviction.name

    @property
    def evicts(self) -> bool:
        return policy_evicts(self.config)

    # ------------------------------------------------------------------ the tape

    def append(self, kind: Segment, tokens: int, turn: int) -> None:
        """New tokens at the end of the tape, resident (hot) until a plan says otherwise."""
        if tokens <= 0:
            return
        if self._segments and self._segments[-1].kind == kind and self._segments[-1].turn == turn:
            last = self._segments.pop()
            self._segments.append(SegmentRun(kind, last.tokens + tokens, turn))
        else:
            self._segments.append(SegmentRun(kind, tokens, turn))
        self._rebuild()

    def truncate(self, n_tokens: int) -> None:
        """The tape now ends at n_tokens (a divergent tail or stop text was dropped)."""
        kept, done = [], 0
        for seg in self._segments:
            if done >= n_tokens:
                break
            kept.append(SegmentRun(seg.kind, min(seg.tokens, n_tokens - done), seg.turn))
            done += kept[-1].tokens
        self._segments = kept
        self._rebuild()

    def segments_from(self, position: int = 0) -> list[SegmentRun]:
        """The segment runs of the tape from `position` to its end."""
        runs, done = [], 0
        for seg in self._segments:
            end = done + seg.tokens
            if end > position:
                runs.append(SegmentRun(seg.kind, end - max(done, position), seg.turn))
            done = end
        return runs

    def reset(self, runs: Sequence[SegmentRun] = ()) -> None:
        """Forget the tape (a new conversation, a restored state) and start from `runs`."""
        self._segments = []
        self._table = BlockTable.empty()
        for run in runs:
            self.append(run.kind, run.tokens, run.turn)

    def _rebuild(self) -> None:
        """Re-cut the blocks; blocks already planned keep their class, flags and reason."""
        old = self._table
        new = BlockTable.from_segments(
            [(s.kind, s.tokens) for s in self._segments],
            self.config.block_size,
            turn_of_segment=[s.turn for s in self._segments],
        )
        # Blocks are cut the same way, so old block i is new block i where both exist,
        # except a last block that grew: it keeps its class.
        n = min(len(old), len(new))
        if n:
            same = (old.start[:n] == new.start[:n])
            keep = np.flatnonzero(same)
            for column in ("cls", "flags", "score", "reason"):
                getattr(new, column)[keep] = getattr(old, column)[keep]
        new.renumber_positions()
        with self._lock:
            self._table = new

    # ------------------------------------------------------------------ plans

    @property
    def n_tokens(self) -> int:
        return self._table.n_tokens

    def _view(self) -> BlockTable:
        """The table every view shows: as tracked, or as modeled from the runtime's eviction."""
        if self.runtime_eviction is not None:
            return modeled_table(self._table, self.runtime_eviction)
        return self._table

    def table(self) -> BlockTable:
        with self._lock:
            return self._view().copy()

    def plan(self, extra_tokens: int = 0) -> BlockTable | None:
        """The policy's plan if `extra_tokens` more were appended now, or None when the
        resident tokens plus those fit the budget."""
        table = self._table
        resident = int(table.sizes[table.resident_mask()].sum())
        # Plans are made when the budget would be exceeded. Evictions always take the
        # oldest unprotected blocks, so below the budget every policy keeps what it has.
        if resident + extra_tokens <= self.budget:
            return None
        if extra_tokens:
            table = table.copy()
            # plan as if the new tokens were already a block at the end: they are the
            # most recent, so windows and budgets count them
            table = _with_tail(table, extra_tokens)
            planned = self.planner.plan(table, self.budget, self.caps)
            return _without_tail(planned)
        return self.planner.plan(table, self.budget, self.caps)

    def demoted(self, planned: BlockTable) -> np.ndarray:
        """Indices of blocks resident now that the plan takes out of the cache."""
        now = self._table.resident_mask()
        return np.flatnonzero(now[: len(planned)] & ~planned.resident_mask())

    def commit(self, planned: BlockTable) -> None:
        """The executor applied the plan: it is the table now."""
        planned.renumber_positions()
        with self._lock:
            self._table = planned

    def mark_range(self, start: int, end: int, cls: BlockClass, reason: Reason) -> None:
        """Give the blocks overlapping [start, end) a class, as an executor recorded it."""
        planned = self._table.planned_copy()
        overlap = (planned.start < end) & (planned.end > start)
        planned.cls[overlap] = cls
        planned.reason[overlap] = reason
        self.commit(planned)

    def resident_tokens(self, tape: list[int]) -> list[int]:
        """The tokens the cache holds, in cache order: the tape at the resident blocks."""
        t = self._table
        mask = t.resident_mask()
        if mask.all():
            return list(tape[: t.n_tokens])
        arr = np.asarray(tape[: t.n_tokens])
        keep = np.repeat(mask, t.sizes)
        return arr[keep].tolist()

    def is_resident(self, start: int, end: int) -> bool:
        t = self._view()
        overlap = (t.start < end) & (t.end > start)
        return bool(overlap.any() and t.resident_mask()[overlap].all())

    def report(self) -> ResidencyReport:
        with self._lock:
            if self.runtime_eviction is not None:
                return ResidencyReport.from_table(self._view(), self.policy, self.source, self.runtime_eviction.max_tokens)
            return ResidencyReport.from_table(self._table, self.policy, self.source, self.budget)


def _with_tail(table: BlockTable, extra: int) -> BlockTable:
    last_use = int(table.last_use.max()) + 1 if len(table) else 0
    end = table.n_tokens
    return BlockTable(
        np.append(table.start, end), np.append(table.end, end + extra), np.append(table.position, -1),
        np.append(table.cls, BlockClass.HOT), np.append(table.flags, 0), np.append(table.segment, Segment.OTHER),
        np.append(table.last_use, last_use), np.append(table.score, np.nan), np.append(table.reason, 0),
    )


def _without_tail(table: BlockTable) -> BlockTable:
    return BlockTable(
        table.start[:-1], table.end[:-1], table.position[:-1], table.cls[:-1], table.flags[:-1],
        table.segment[:-1], table.last_use[:-1], table.score[:-1], table.reason[:-1],
    )
