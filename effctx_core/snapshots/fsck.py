"""Checks that make the index agree with the blobs: what `snapshots gc` and `verify` run.

reconcile: under the store lock, the index lists exactly the blobs on disk (a blob found
without an entry is adopted from its header, an entry without a blob dropped).
check_blobs: every blob read in full, without the lock; the bad ones handed to `set_aside`.
reindex: under the lock, records that disagree with their checked blob are rewritten.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from effctx_core.snapshots.blobfile import BLOB_SUFFIX, BlobContents, BlobDamage, is_digest, read_blob, read_summary
from effctx_core.snapshots.blobs import BlobFiles, is_temp
from effctx_core.snapshots.errors import SnapshotStoreError
from effctx_core.snapshots.index import IndexData, IndexRecord
from effctx_core.snapshots.quarantine import Quarantine

SetAside = Callable[[Path, str, BlobDamage, os.stat_result], object]


def mismatch(name_key: str, header_key: str) -> str:
    return (f"the file name says key {name_key[:12]}, its header's identity and tokens give "
            f"{header_key[:12]}")


def check_key(contents: BlobContents, key: str) -> None:
    if contents.header.key != key:
        raise BlobDamage("key-mismatch", mismatch(key, contents.header.key))


def reconcile(index: IndexData, blobs: BlobFiles, quarantine: Quarantine) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(adopted, dropped) keys."""
    on_disk = blobs.on_disk()
    dropped = tuple(sorted(k for k in index.entries if k not in on_disk))
    for key in dropped:
        index.drop(key)
    adopted = []
    for key in sorted(set(on_disk) - set(index.entries)):
        path = on_disk[key]
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            continue
        with f:
            st = os.fstat(f.fileno())
            try:
                header, meta = read_summary(f)
                if header.key != key:
                    raise BlobDamage("key-mismatch", mismatch(key, header.key))
            except BlobDamage as damage:
                quarantine.move(path, damage)
                continue
        # Found without an entry: its writer died between rename and index update.
        # Nothing says it was used recently, so it goes first under LRU.
        index.add(key, IndexRecord.of(header, meta, st.st_size, st.st_mtime, st.st_mtime, 0))
        adopted.append(key)
    return tuple(adopted), dropped


def check_blobs(blobs: BlobFiles, set_aside: SetAside) -> tuple[int, dict[str, BlobContents]]:
    """(files checked, key -> checked contents without payload)."""
    checked = 0
    good: dict[str, BlobContents] = {}
    for path in blobs.files():
        name = path.name
        if is_temp(name):
            continue  # a writer's business; gc removes dead writers' files
        checked += 1
        key = name[: -len(BLOB_SUFFIX)] if name.endswith(BLOB_SUFFIX) else ""
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            continue
        except OSError as exc:  # permissions, not damage: nothing to quarantine
            raise SnapshotStoreError(f"cannot read snapshot {path}: {exc.strerror}") from None
        with f:
            st = os.fstat(f.fileno())
            try:
                if not is_digest(key):
                    raise BlobDamage("stray", "not a snapshot blob file name")
                contents = read_blob(f, want_payload=False)
                check_key(contents, key)
                good[key] = contents
            except BlobDamage as damage:
                set_aside(path, key or name, damage, st)
            except OSError as exc:
                set_aside(path, key or name, BlobDamage("unreadable", f"unreadable: {exc.strerror}"), st)
    return checked, good


def reindex(index: IndexData, good: dict[str, BlobContents], blobs: BlobFiles) -> tuple[str, ...]:
    """Keys whose record disagreed with their blob, now rewritten from it (usage kept)."""
    reindexed = []
    for key, contents in good.items():
        record = index.entries.get(key)
        size = blobs.size(key)
        if record is None or size is None:
            continue
        h = contents.header
        if (record.identity, record.n_tokens, record.token_hash, record.bytes, record.meta) != (
            h.identity, h.n_tokens, h.token_hash, size, contents.meta
        ):
            index.add(key, IndexRecord.of(h, contents.meta, size, record.created, record.last_used, record.use))
            reindexed.append(key)
    return tuple(reindexed)
