"""Persistent, bounded, content-addressed snapshot store (see store.py for the layout)."""

from effctx_core.snapshots.blobfile import key_for, token_hash
from effctx_core.snapshots.budget import BUDGET_ENV
from effctx_core.snapshots.codec import decode, encode, load_snapshot, save_snapshot, snapshot_key
from effctx_core.snapshots.errors import (
    AmbiguousSnapshotIdError,
    CorruptSnapshotError,
    ForeignSnapshotError,
    SnapshotBudgetError,
    SnapshotError,
    SnapshotInUseError,
    SnapshotNotFoundError,
    SnapshotStoreError,
)
from effctx_core.snapshots.store import (
    EntryInfo,
    GcReport,
    Peek,
    Quarantined,
    SnapshotStore,
    Stored,
    StoreUsage,
    VerifyReport,
)

__all__ = [
    "AmbiguousSnapshotIdError", "BUDGET_ENV", "CorruptSnapshotError", "EntryInfo", "ForeignSnapshotError",
    "GcReport", "Peek", "Quarantined", "SnapshotBudgetError", "SnapshotError", "SnapshotInUseError",
    "SnapshotNotFoundError", "SnapshotStore", "SnapshotStoreError", "StoreUsage", "Stored", "VerifyReport",
    "decode", "encode", "key_for", "load_snapshot", "save_snapshot", "snapshot_key", "token_hash",
]
