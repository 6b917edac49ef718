"""Typed errors of the snapshot store; each message is one line a user can act on."""

from __future__ import annotations

from pathlib import Path

from effctx_core.errors import EffctxError


class SnapshotError(EffctxError):
    """Base of every snapshot-store error."""


class SnapshotStoreError(SnapshotError):
    """The store's directory cannot be read or written (disk full, read-only, ...).

    The caller may keep running without the cache: nothing partial was left behind.
    """


class SnapshotBudgetError(SnapshotError):
    """A put does not fit the byte budget, even after evicting everything evictable."""


class SnapshotNotFoundError(SnapshotError):
    """No entry has this key or ID (or it was evicted meanwhile)."""


class AmbiguousSnapshotIdError(SnapshotError):
    """An ID prefix matches more than one entry."""


class SnapshotInUseError(SnapshotError):
    """An entry a saved snapshot tree references cannot be removed without force."""


class CorruptSnapshotError(SnapshotError):
    """A blob failed a check; it was moved to quarantine (when `moved_to` is set)."""

    def __init__(self, key: str, reason: str, moved_to: Path | None = None):
        self.key = key
        self.reason = reason
        self.moved_to = moved_to
        where = f"; moved to {moved_to}" if moved_to else ""
        super().__init__(f"snapshot {key[:12]} is corrupt: {reason}{where}")


class ForeignSnapshotError(SnapshotError):
    """A valid blob written under another runtime identity than the caller expects."""

    def __init__(self, key: str, expected: str, found: str):
        self.key = key
        self.expected = expected
        self.found = found
        super().__init__(
            f"snapshot {key[:12]} belongs to runtime identity {found[:16]}, not {expected[:16]}"
        )
