"""The token tape cut into blocks, stored column-wise in numpy.

A tape of 1M tokens is tens of thousands of blocks; planners and the residency view
work on whole columns at once, never on a Python object per block. `BlockTable.block(i)`
gives one block as a record for inspection.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import Iterable, Sequence

import numpy as np


class BlockClass(IntEnum):
    SINK = 0
    RECENT = 1
    HOT = 2
    COLD = 3  # not in the backend's KV, recoverable (recompute or parked bytes)
    EVICTED = 4  # gone

    @property
    def label(self) -> str:
        return self.name.lower()

    @property
    def resident(self) -> bool:
        return self in (BlockClass.SINK, BlockClass.RECENT, BlockClass.HOT)


class BlockFlag(IntFlag):
    NONE = 0
    PINNED = 1
    SINK = 2
    RECENT = 4


class Segment(IntEnum):
    """Where a block's tokens came from; eviction prefers the later names first."""

    SYSTEM = 0
    DOCUMENT = 1
    USER = 2
    ASSISTANT = 3
    TOOL = 4
    OTHER = 5

    @property
    def label(self) -> str:
        return self.name.lower()


class Reason(IntEnum):
    """Why a block has its class; shown when the cursor inspects a block."""

    UNPLANNED = 0
    SINK_WINDOW = 1
    RECENT_WINDOW = 2
    PINNED = 3
    FITS_BUDGET = 4
    EVICTED_OUTSIDE_WINDOWS = 5
    EVICTED_SEGMENT = 6
    EVICTED_LRU = 7
    EVICTED_SCORE = 8
    PARKED = 9
    SLID_OUT = 10

    @property
    def text(self) -> str:
        return _REASON_TEXT[self]


_REASON_TEXT = {
    # Plans are made only when the tape would exceed the budget (ResidencyTracker.plan),
    # with a policy or without one.
    Reason.UNPLANNED: "resident: the tape is within the budget, so no block has had to go",
    Reason.SINK_WINDOW: "inside the attention-sink tokens at the start of the tape",
    Reason.RECENT_WINDOW: "inside the recent window at the end of the tape",
    Reason.PINNED: "pinned by the user",
    Reason.FITS_BUDGET: "fits the token budget",
    Reason.EVICTED_OUTSIDE_WINDOWS: "outside the sink and recent windows of a streaming policy",
    Reason.EVICTED_SEGMENT: "over budget: its segment kind is evicted first",
    Reason.EVICTED_LRU: "over budget: least recently used",
    Reason.EVICTED_SCORE: "over budget: lowest attention score",
    Reason.PARKED: "parked cold: its tokens stay in the tape and can be recomputed",
    Reason.SLID_OUT: "slid out of the window while decoding past the budget",
}


@dataclass(frozen=True)
class Block:
    index: int
    start: int
    end: int
    position: int  # current position of the first token, after shifts (-1 when not resident)
    cls: BlockClass
    flags: BlockFlag
    segment: Segment
    last_use: int
    score: float | None
    reason: Reason

    @property
    def tokens(self) -> int:
        return self.end - self.start


class BlockTable:
    """Columns: start, end (original positions, end exclusive), position, cls, flags,
    segment, last_use, score (NaN = none), reason."""

    def __init__(self, start, end, position, cls, flags, segment, last_use, score, reason):
        self.start = np.asarray(start, dtype=np.int64)
        self.end = np.asarray(end, dtype=np.int64)
        self.position = np.asarray(position, dtype=np.int64)
        self.cls = np.asarray(cls, dtype=np.int8)
        self.flags = np.asarray(flags, dtype=np.uint8)
        self.segment = np.asarray(segment, dtype=np.int8)
        self.last_use = np.asarray(last_use, dtype=np.int64)
        self.score = np.asarray(score, dtype=np.float32)
        self.reason = np.asarray(reason, dtype=np.int8)

    # ------------------------------------------------------------------ building

    @classmethod
    def from_segments(
        cls,
        segments: Iterable[tuple[Segment, int]],
        block_size: int,
        turn_of_segment: Sequence[int] | None = None,
    ) -> "BlockTable":
        """Cut consecutive segments (kind, token count) into blocks of at most
        block_size tokens; a block never spans two segments."""
        starts, ends, kinds, uses = [], [], [], []
        offset = 0
        for i, (kind, n) in enumerate(segments):
            if n <= 0:
                continue
            cuts = np.arange(offset, offset + n, block_size, dtype=np.int64)
            starts.append(cuts)
            ends.append(np.minimum(cuts + block_size, offset + n))
            kinds.append(np.full(len(cuts), int(kind), dtype=np.int8))
            uses.append(np.full(len(cuts), turn_of_segment[i] if turn_of_segment else i, dtype=np.int64))
            offset += n
        if not starts:
            return cls.empty()
        start = np.concatenate(starts)
        n_blocks = len(start)
        return cls(
            start=start,
            end=np.concatenate(ends),
            position=start.copy(),
            cls=np.full(n_blocks, BlockClass.HOT, dtype=np.int8),
            flags=np.zeros(n_blocks, dtype=np.uint8),
            segment=np.concatenate(kinds),
            last_use=np.concatenate(uses),
            score=np.full(n_blocks, np.nan, dtype=np.float32),
            reason=np.zeros(n_blocks, dtype=np.int8),
        )

    @classmethod
    def empty(cls) -> "BlockTable":
        z = np.zeros(0)
        return cls(z, z, z, z, z, z, z, z, z)

    def planned_copy(self) -> "BlockTable":
        """A copy whose plan columns (class, flags, reason) can change; the tape columns are
        shared, read-only, which saves most of a plan's copying on a long tape."""
        return BlockTable(
            self.start, self.end, self.position, self.cls.copy(), self.flags.copy(),
            self.segment, self.last_use, self.score, self.reason.copy(),
        )

    def copy(self) -> "BlockTable":
        return BlockTable(
            self.start.copy(), self.end.copy(), self.position.copy(), self.cls.copy(), self.flags.copy(),
            self.segment.copy(), self.last_use.copy(), self.score.copy(), self.reason.copy(),
        )

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return len(self.start)

    @property
    def sizes(self) -> np.ndarray:
        return self.end - self.start

    @property
    def n_tokens(self) -> int:
        return int(self.end[-1]) if len(self) else 0

    def tokens_in(self, *classes: BlockClass) -> int:
        mask = np.isin(self.cls, [int(c) for c in classes])
        return int(self.sizes[mask].sum())

    def resident_mask(self) -> np.ndarray:
        return self.cls <= BlockClass.HOT

    def block(self, i: int) -> Block:
        score = float(self.score[i])
        return Block(
            index=i,
            start=int(self.start[i]),
            end=int(self.end[i]),
            position=int(self.position[i]),
            cls=BlockClass(int(self.cls[i])),
            flags=BlockFlag(int(self.flags[i])),
            segment=Segment(int(self.segment[i])),
            last_use=int(self.last_use[i]),
            score=None if np.isnan(score) else score,
            reason=Reason(int(self.reason[i])),
        )

    def block_at(self, token: int) -> int:
        """Index of the block holding original position `token`."""
        return int(np.searchsorted(self.end, token, side="right"))

    def ranges_of(self, *classes: BlockClass) -> list[tuple[int, int]]:
        """Merged [start, end) ranges of original positions whose blocks have these classes."""
        mask = np.isin(self.cls, [int(c) for c in classes])
        if not mask.any():
            return []
        idx = np.flatnonzero(mask)
        # a new range starts where the previous selected block is not adjacent
        breaks = np.flatnonzero(np.diff(idx) != 1) + 1
        return [
            (int(self.start[group[0]]), int(self.end[group[-1]]))
            for group in np.split(idx, breaks)
        ]

    def renumber_positions(self) -> None:
        """Current positions after the evicted or cold blocks before each one are removed
        from the cache and later positions shifted down."""
        resident = self.resident_mask()
        sizes = np.where(resident, self.sizes, 0)
        before = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        self.position = np.where(resident, before, -1)
