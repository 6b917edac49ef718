"""refs.json: which saved snapshot trees (owners) keep which entries alive.

Refs cannot be rebuilt from the blobs, so a damaged file is never guessed at: reading it
raises DamagedRefs until `effctx snapshots verify` sets it aside.

File format 1: {"format": 1, "owners": {owner: [key, ...]}}, keys sorted, indent 1.
"""

from __future__ import annotations

import json
from pathlib import Path

from effctx_core.atomic import atomic_write_bytes
from effctx_core.snapshots.blobfile import is_digest
from effctx_core.snapshots.errors import SnapshotError, SnapshotStoreError

REFS_FORMAT = 1


class DamagedRefs(SnapshotStoreError):
    pass


class Refs:
    """owner -> the keys it keeps, in the order they were added."""

    def __init__(self, owners: dict[str, list[str]] | None = None):
        self.owners: dict[str, list[str]] = owners if owners is not None else {}
        self.changed = False  # to be written back

    def keys_of(self, owner: str) -> tuple[str, ...]:
        return tuple(sorted(self.owners.get(owner, [])))

    def by_key(self) -> dict[str, tuple[str, ...]]:
        """key -> the owners keeping it, sorted."""
        out: dict[str, list[str]] = {}
        for owner, keys in self.owners.items():
            for key in keys:
                out.setdefault(key, []).append(owner)
        return {key: tuple(sorted(owners)) for key, owners in out.items()}

    def add(self, owner: str, key: str) -> None:
        keys = self.owners.setdefault(owner, [])
        if key not in keys:
            keys.append(key)
            self.changed = True

    def drop_owner(self, owner: str) -> int:
        removed = len(self.owners.pop(owner, []))
        if removed:
            self.changed = True
        return removed

    def drop_key(self, key: str) -> None:
        for owner, keys in self.owners.items():
            if key in keys:
                self.owners[owner] = [k for k in keys if k != key]
                self.changed = True

    def dangling(self, known: set[str] | dict) -> tuple[tuple[str, str], ...]:
        """(owner, key) of every ref to a key not in `known`."""
        return tuple(sorted((o, k) for o, keys in self.owners.items() for k in keys if k not in known))

    def to_bytes(self) -> bytes:
        clean = {owner: sorted(set(keys)) for owner, keys in self.owners.items() if keys}
        return json.dumps({"format": REFS_FORMAT, "owners": clean}, sort_keys=True, indent=1).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Refs:
        """Raises ValueError for a file this code did not write."""
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("format") != REFS_FORMAT:
            raise ValueError("unknown refs format")
        owners = data.get("owners")
        if not isinstance(owners, dict):
            raise ValueError("refs fields missing")
        for owner, keys in owners.items():
            if not isinstance(keys, list) or not all(is_digest(k) for k in keys):
                raise ValueError(f"bad refs of {owner!r}")
        return cls(owners)


class RefsFile:
    def __init__(self, path: Path):
        self.path = path

    def read(self) -> Refs:
        try:
            raw = self.path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return Refs()
        except OSError as exc:
            raise SnapshotStoreError(f"cannot read snapshot refs {self.path}: {exc.strerror}") from None
        try:
            return Refs.from_bytes(raw)
        except (ValueError, UnicodeDecodeError):
            raise DamagedRefs(
                f"snapshot refs file {self.path} is damaged; `effctx snapshots verify` sets it aside "
                "(saved trees then no longer protect their snapshots from eviction)"
            ) from None

    def write(self, refs: Refs) -> None:
        atomic_write_bytes(self.path, refs.to_bytes())
        refs.changed = False


def check_owner(owner: str) -> None:
    if not isinstance(owner, str) or not owner.strip():
        raise SnapshotError("a snapshot ref owner must be a non-empty string")
