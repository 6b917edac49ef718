"""What every planner shares: the base class, capabilities, and marking the protected windows.

A planner is pure policy: (blocks, budget, capabilities) -> a new table whose classes and
reasons are the plan. It never touches a backend; an executor applies the plan. Each
policy class declares its name, the profile parameters it takes, what it needs from the
backend, and what its plans do (evict, keep to the budget); the registry in this package
maps names to classes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from effctx_core.errors import EffctxError
from effctx_core.residency.blocks import BlockClass, BlockFlag, BlockTable, Reason

if TYPE_CHECKING:
    from effctx_core.profiles import ResidencyConfig


@dataclass(frozen=True)
class PlannerCaps:
    """What the backend can tell a planner."""

    attention_scores: bool = False


class Planner:
    """A residency policy: one subclass a module, registered by its name."""

    name: ClassVar[str]
    # The [residency] fields of a profile the policy takes, as keyword arguments.
    params: ClassVar[tuple[str, ...]] = ()
    # What the policy needs from the backend: a PlannerCaps field -> what it is, in words.
    needs: ClassVar[Mapping[str, str]] = {}
    # Whether its plans take tokens out of the cache.
    evicts: ClassVar[bool] = True
    # Whether its plans keep the tape to the token budget (so the budget can be steered).
    keeps_budget: ClassVar[bool] = False

    @classmethod
    def from_config(cls, config: ResidencyConfig) -> Planner:
        return cls(**{name: getattr(config, name) for name in cls.params})

    @classmethod
    def check_config(cls, config: ResidencyConfig, where: str) -> None:
        """Raise EffctxError if the profile's parameters do not suit this policy."""

    @classmethod
    def check_caps(cls, caps: PlannerCaps) -> list[str]:
        """What the policy needs and the backend does not supply, in words."""
        return [what for field, what in cls.needs.items() if not getattr(caps, field)]

    def plan(self, table: BlockTable, budget: int, caps: PlannerCaps) -> BlockTable:
        raise NotImplementedError


class WindowedPlanner(Planner):
    """A policy that protects attention-sink tokens and a recent window."""

    params = ("sink_tokens", "recent_tokens")

    def __init__(self, sink_tokens: int, recent_tokens: int):
        self.sink_tokens = sink_tokens
        self.recent_tokens = recent_tokens

    @classmethod
    def check_config(cls, config: ResidencyConfig, where: str) -> None:
        for name in ("sink_tokens", "recent_tokens"):
            if getattr(config, name) % config.block_size:
                raise EffctxError(
                    f"{where}: residency.{name} {getattr(config, name)} is not a multiple of block_size {config.block_size}"
                )
        if config.budget and config.sink_tokens + config.recent_tokens > config.budget:
            raise EffctxError(
                f"{where}: sink_tokens {config.sink_tokens} + recent_tokens {config.recent_tokens} "
                f"is above the budget {config.budget}"
            )


def mark_windows(table: BlockTable, sink_tokens: int, recent_tokens: int) -> tuple[BlockTable, np.ndarray]:
    """A copy with sink, recent and pinned blocks marked; returns it and the mask of the
    blocks still open to the policy (not protected, not already gone)."""
    out = table.planned_copy()
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


def sort_keys(idx: np.ndarray, *keys: tuple[np.ndarray, int]) -> np.ndarray:
    """One unique int64 per block: the keys (first key first), ties by block index.

    Each key is (non-negative integer array, bits it needs), packed above the 24-bit block
    index, so a plain quicksort or partition gives a deterministic order, several times
    faster than lexsort on tens of thousands of blocks.
    """
    packed = idx.astype(np.int64)
    shift = 24
    for key, bits in reversed(keys):
        packed |= np.clip(key, 0, (1 << bits) - 1).astype(np.int64) << shift
        shift += bits
    assert shift <= 63, "sort keys do not fit one int64"
    return packed


def fewest_reaching(keys: np.ndarray, sizes: np.ndarray, target: int) -> np.ndarray:
    """Positions of the fewest smallest-key entries whose sizes add up to `target`,
    in key order.

    A partition finds the k smallest in linear time; only those are sorted. k starts at
    the least count that could do (every entry as large as the largest) and doubles, so
    a plan that parks a few blocks of a million-token tape never sorts all of them.
    """
    n = len(keys)
    k = min(n, max(1, -(-target // max(1, int(sizes.max())))))
    while True:
        if k >= n:
            order = np.argsort(keys)
        else:
            part = np.argpartition(keys, k - 1)[:k]
            order = part[np.argsort(keys[part])]
        total = np.cumsum(sizes[order])
        if total[-1] >= target or k >= n:
            return order[: int(np.searchsorted(total, target)) + 1]
        k = min(n, 2 * k)


def split_lowest(keys: np.ndarray, sizes: np.ndarray, over: int, room: int) -> tuple[np.ndarray, np.ndarray]:
    """(victims, keepers) as masks: the lowest-key entries that free at least `over`
    tokens, and the rest, whose sizes then fit `room`. Works from whichever end is shorter."""
    victims = np.zeros(len(keys), dtype=bool)
    if over <= len(sizes) and over * 2 <= int(sizes.sum()):
        victims[fewest_reaching(keys, sizes, over)] = True
    else:
        # Most entries go: find the keepers instead, the highest keys that fit the room.
        victims[:] = True
        if room > 0:
            kept = fewest_reaching(-keys, sizes, room + 1)[:-1]
            victims[kept] = False
    return victims, ~victims


def float_key(values: np.ndarray) -> np.ndarray:
    """float32 values as unsigned 32-bit integers in the same order (NaN last)."""
    bits = np.nan_to_num(values.astype(np.float32), nan=np.inf).view(np.uint32).astype(np.int64)
    return np.where(bits >> 31, bits ^ 0xFFFFFFFF, bits | 0x80000000)
