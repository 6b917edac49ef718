"""How many bytes the snapshot store may hold, and why."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from effctx_core.errors import EffctxError
from effctx_core.units import format_bytes, parse_memory

BUDGET_ENV = "EFFCTX_SNAPSHOT_BUDGET"
DISK_SHARE = 10  # percent of free disk
BUDGET_CAP = 8 << 30
BUDGET_FLOOR = 256 << 20


@dataclass(frozen=True)
class Budget:
    bytes: int
    source: str  # one line: where the number comes from


def resolve_budget(budget_bytes: int | None, root: Path, stored_bytes: int) -> Budget:
    """Caller's number, else $EFFCTX_SNAPSHOT_BUDGET, else a share of the free disk."""
    if budget_bytes is not None:
        if budget_bytes <= 0:
            raise EffctxError(f"snapshot budget must be more than 0 bytes, not {budget_bytes}")
        return Budget(budget_bytes, "set by the caller")
    env = os.environ.get(BUDGET_ENV, "").strip()
    if env:
        try:
            return Budget(parse_memory(env), f"{BUDGET_ENV}={env}")
        except EffctxError as exc:
            raise EffctxError(f"{BUDGET_ENV}: {exc}") from None
    # What the store already holds counts as free: the budget must not shrink because
    # the store itself filled the disk.
    free = _free_bytes(root) + stored_bytes
    return Budget(default_budget(free), f"{DISK_SHARE}% of {format_bytes(free)} free disk, "
                                        f"between {format_bytes(BUDGET_FLOOR)} and {format_bytes(BUDGET_CAP)}")


def default_budget(free_bytes: int) -> int:
    """A tenth of the free disk: enough to matter, never enough to fill it; within floor and cap."""
    return min(BUDGET_CAP, max(BUDGET_FLOOR, free_bytes * DISK_SHARE // 100))


def _free_bytes(root: Path) -> int:
    probe = Path(root)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return 0
