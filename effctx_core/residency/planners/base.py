"""What every planner shares: the protocol, capabilities, and marking the protected windows.

A planner is pure policy: (blocks, budget, capabilities) -> a new table whose classes and
reasons are the plan. It never touches a backend; an executor applies the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..blocks import BlockClass, BlockFlag, BlockTable, Reason


@dataclass(frozen=True)
class PlannerCaps:
    """What the backend can tell a planner."""

    attention_scores: bool = False


class Planner(Protocol):
    name: str

    def plan(self, table: BlockTable, budget: int, caps: PlannerCaps) -> BlockTable: ...


class WindowedPlanner:
    """A policy that protects attention-sink tokens and a recent window."""

    name = "windowed"

    def __init__(self, sink_tokens: int, recent_tokens: int):
        self.sink_tokens = sink_tokens
        self.recent_tokens = recent_tokens


def mark_windows(table: BlockTable, sink_tokens: int, recent_tokens: int) -> tuple[BlockTable, np.ndarray]:
    """A copy with sink, recent and pinned blocks marked; returns it and the mask of the
    blocks still open to the policy (not protected, not already gone)."""
    out = table.copy()
    n = out.n_tokens
    gone = out.cls >= BlockClass.COLD
    sink = (out.start < sink_tokens) & ~gone
    # Whole blocks only: a block straddling the window's edge stays out of it, so the
    # windows never hold more tokens than they are given.
    recent = (out.start >= n - recent_tokens) & ~gone & ~sink if recent_tokens else np.zeros(len(out), bool)
    pinned = ((out.flags & BlockFlag.PINNED) != 0) & ~gone & ~sink & ~recent
    out.flags &= np.uint8(~(BlockFlag.SINK | BlockFlag.RECENT) & 0xFF)
    out.flags[sink] |= np.uint8(BlockFlag.SINK)
    out.flags[recent] |= np.uint8(BlockFlag.RECENT)
    out.cls[sink] = BlockClass.SINK
    out.reason[sink] = Reason.SINK_WINDOW
    out.cls[recent] = BlockClass.RECENT
    out.reason[recent] = Reason.RECENT_WINDOW
    out.cls[pinned] = BlockClass.HOT
    out.reason[pinned] = Reason.PINNED
    open_ = ~(gone | sink | recent | pinned)
    return out, open_


def protected_tokens(table: BlockTable, open_: np.ndarray) -> int:
    resident = table.cls <= BlockClass.HOT
    return int(table.sizes[resident & ~open_].sum())


def ascending_order(idx: np.ndarray, *keys: tuple[np.ndarray, int]) -> np.ndarray:
    """Positions into `idx` sorted by the keys (first key first), ties by block index.

    Each key is (non-negative integer array, bits it needs). They are packed with the
    24-bit block index into one unique int64 per block, so a plain quicksort gives a
    deterministic order, several times faster than lexsort on tens of thousands of blocks.
    """
    packed = idx.astype(np.int64)
    shift = 24
    for key, bits in reversed(keys):
        packed |= np.clip(key, 0, (1 << bits) - 1).astype(np.int64) << shift
        shift += bits
    assert shift <= 63, "sort keys do not fit one int64"
    return np.argsort(packed)


def float_key(values: np.ndarray) -> np.ndarray:
    """float32 values as unsigned 32-bit integers in the same order (NaN last)."""
    bits = np.nan_to_num(values.astype(np.float32), nan=np.inf).view(np.uint32).astype(np.int64)
    return np.where(bits >> 31, bits ^ 0xFFFFFFFF, bits | 0x80000000)
