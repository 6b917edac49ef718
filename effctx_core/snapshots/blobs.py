"""blobs/: one file per entry, <key>.snap (format: blobfile.py), immutable once renamed.

A blob being written is a temp file .<key16>.*.tmp in the same folder, flock'ed by its
writer while it lives (the writing itself is store.py's, where it is timed and tested).
"""

from __future__ import annotations

from pathlib import Path

from effctx_core.atomic import fsync_dir
from effctx_core.snapshots import locking
from effctx_core.snapshots.blobfile import BLOB_SUFFIX, BlobDamage, is_digest, read_tokens
from effctx_core.snapshots.errors import SnapshotStoreError


def write_error(root: Path, exc: OSError) -> SnapshotStoreError:
    return SnapshotStoreError(f"cannot write snapshot store at {root}: {exc.strerror or exc}")


def is_temp(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")


class BlobFiles:
    def __init__(self, root: Path):
        self.root = root  # the store's, for messages
        self.dir = root / "blobs"

    def path(self, key: str) -> Path:
        return self.dir / f"{key}{BLOB_SUFFIX}"

    def files(self) -> list[Path]:
        """Every file in the folder, blobs, temps and strays, by name."""
        try:
            return sorted(self.dir.iterdir())
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise SnapshotStoreError(f"cannot read snapshot store at {self.root}: {exc.strerror}") from None

    def on_disk(self) -> dict[str, Path]:
        """key -> path of every file named like a blob."""
        return {p.name[: -len(BLOB_SUFFIX)]: p for p in self.files()
                if p.name.endswith(BLOB_SUFFIX) and is_digest(p.name[: -len(BLOB_SUFFIX)])}

    def size(self, key: str) -> int | None:
        try:
            return self.path(key).stat().st_size
        except FileNotFoundError:
            return None

    def delete(self, keys: tuple[str, ...] | list[str]) -> None:
        for key in keys:
            self.path(key).unlink(missing_ok=True)
        if keys:
            fsync_dir(self.dir)

    def tokens(self, key: str) -> tuple[int, ...] | None:
        """The checked token list of a blob; None when it is gone or does not check out
        (a read that counts, get or verify, sets a damaged one aside)."""
        try:
            with open(self.path(key), "rb") as f:
                header, tokens = read_tokens(f)
        except (OSError, BlobDamage):
            return None
        return tokens if header.key == key else None

    def remove_stale_temps(self, extra: list[Path], now: float, stale_after: float) -> tuple[str, ...]:
        """Temp files of writers gone for `stale_after` seconds (a live writer's flock keeps
        its file however old), of this folder and `extra`."""
        removed = []
        for path in [p for p in self.files() if is_temp(p.name)] + extra:
            try:
                age = now - path.stat().st_mtime
            except FileNotFoundError:
                continue
            if age < stale_after or locking.held_by_someone(path):
                continue
            path.unlink(missing_ok=True)
            removed.append(path.name)
        return tuple(removed)
