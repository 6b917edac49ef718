"""The store's entry index: typed records, and index.json, the file that holds them.

The index is a cache of what the blob headers say plus usage (last use, an LRU clock);
it can be rebuilt from the blobs, so a damaged index costs only usage history. The refs
of saved trees cannot be rebuilt and live in their own file (refs.py), so that damage to
one never takes the other with it.

File format (unchanged since format 1): {"format": 1, "clock": N, "entries": {key: {
"identity", "n_tokens", "token_hash", "bytes", "created", "last_used", "use", "meta"}},
"gone": [[key, "evicted" | "removed"], ...]}, compact JSON with sorted keys. "gone" (added
later: absent in older files, which still read; older effctx ignores it) remembers why the
last GONE_KEEP entries the store let go of are gone, oldest first, so a tree can tell a
state evicted to stay under the store's limit from one a person removed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from effctx_core.atomic import atomic_write_bytes
from effctx_core.snapshots.blobfile import BlobHeader, is_digest, key_from_hashes
from effctx_core.snapshots.errors import SnapshotStoreError
from effctx_core.snapshots.locking import StoreLock

INDEX_FORMAT = 1

EVICTED = "evicted"  # to stay under the store's byte limit
REMOVED = "removed"  # by `effctx snapshots rm`, or by a session giving back a state it made
# Enough for the trees a person keeps (a state is one turn), at about 80 bytes a key in an
# index that is rewritten on every use.
GONE_KEEP = 1024

_RECORD_TYPES: dict[str, type | tuple[type, ...]] = {
    "identity": str, "n_tokens": int, "token_hash": str, "bytes": int,
    "created": (int, float), "last_used": (int, float), "use": int, "meta": dict,
}


@dataclass(frozen=True)
class IndexRecord:
    """What the index knows of one entry. `use` is the LRU clock's tick of its last use."""

    identity: str
    n_tokens: int
    token_hash: str
    bytes: int
    created: float  # seconds since the epoch; an int when the file had one (kept as read)
    last_used: float
    use: int
    meta: dict

    @classmethod
    def of(cls, header: BlobHeader, meta: dict, file_bytes: int, created: float, last_used: float,
           use: int) -> IndexRecord:
        return cls(header.identity, header.n_tokens, header.token_hash, file_bytes, created, last_used, use, meta)

    def used(self, tick: int, when: float) -> IndexRecord:
        return replace(self, use=tick, last_used=when)

    def to_json(self) -> dict:
        return {
            "identity": self.identity, "n_tokens": self.n_tokens, "token_hash": self.token_hash,
            "bytes": self.bytes, "created": self.created, "last_used": self.last_used, "use": self.use,
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, key: str, record: object) -> IndexRecord:
        """Raises ValueError for a record this code did not write."""
        if not is_digest(key) or not isinstance(record, dict):
            raise ValueError("bad entry")
        for name, kind in _RECORD_TYPES.items():
            value = record.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"bad entry field {name}")
        if not is_digest(record["identity"]) or not is_digest(record["token_hash"]):
            raise ValueError("bad entry digests")
        if key_from_hashes(record["identity"], record["token_hash"]) != key:
            raise ValueError("entry key does not match its identity and tokens")
        return cls(record["identity"], record["n_tokens"], record["token_hash"], record["bytes"],
                   record["created"], record["last_used"], record["use"], record["meta"])


@dataclass
class IndexData:
    clock: int = 0  # logical LRU clock: wall clocks jump and tie, this does not
    entries: dict[str, IndexRecord] = field(default_factory=dict)
    # key -> EVICTED or REMOVED, oldest first, at most GONE_KEEP of them.
    gone: dict[str, str] = field(default_factory=dict)
    changed: bool = field(default=False, compare=False)  # to be written back

    def total_bytes(self, skip: str | None = None) -> int:
        return sum(r.bytes for k, r in self.entries.items() if k != skip)

    def tick(self) -> int:
        self.clock += 1
        self.changed = True
        return self.clock

    def add(self, key: str, record: IndexRecord) -> None:
        self.entries[key] = record
        self.gone.pop(key, None)
        self.changed = True

    def drop(self, key: str, why: str | None = None) -> IndexRecord | None:
        """Take the entry out; `why` (EVICTED, REMOVED) is remembered, where the store let
        go of it on purpose (not for a blob found missing or set aside)."""
        record = self.entries.pop(key, None)
        if record is not None:
            self.changed = True
        if why is not None:
            self.gone.pop(key, None)  # the newest reason, at the young end
            self.gone[key] = why
            while len(self.gone) > GONE_KEEP:
                del self.gone[next(iter(self.gone))]
            self.changed = True
        return record

    def touch(self, key: str, when: float) -> None:
        record = self.entries.get(key)
        if record is not None:
            self.entries[key] = record.used(self.tick(), when)

    def to_bytes(self) -> bytes:
        data = {"format": INDEX_FORMAT, "clock": self.clock,
                "entries": {k: r.to_json() for k, r in self.entries.items()},
                # a list, not an object: sort_keys would lose which is oldest
                "gone": [[k, why] for k, why in self.gone.items()]}
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> IndexData:
        """Raises ValueError if the file is not an index this code wrote."""
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT:
            raise ValueError("unknown index format")
        clock, entries, gone = data.get("clock"), data.get("entries"), data.get("gone", [])
        if not isinstance(clock, int) or not isinstance(entries, dict) or not isinstance(gone, list):
            raise ValueError("index fields missing")
        if not all(isinstance(item, list) and len(item) == 2 and is_digest(item[0]) and item[1] in (EVICTED, REMOVED)
                   for item in gone):
            raise ValueError("bad gone keys")
        return cls(clock, {key: IndexRecord.from_json(key, record) for key, record in entries.items()},
                   {key: why for key, why in gone[-GONE_KEEP:]})


Signature = tuple[int, int, int, int]


class IndexFile:
    """index.json: read without the lock (it is replaced atomically), written under it."""

    def __init__(self, path: Path):
        self.path = path

    def signature(self) -> Signature | None:
        """What tells one version of the file from the next; None when there is none."""
        try:
            st = self.path.stat()
        except (FileNotFoundError, NotADirectoryError):  # no store here (yet)
            return None
        except OSError as exc:
            raise SnapshotStoreError(f"cannot read snapshot index {self.path}: {exc.strerror}") from None
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def read(self) -> IndexData | None:
        """The index; an empty one when there is no file, None when the file is damaged."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return IndexData()
        except OSError as exc:
            raise SnapshotStoreError(f"cannot read snapshot index {self.path}: {exc.strerror}") from None
        try:
            return IndexData.from_bytes(raw)
        except (ValueError, UnicodeDecodeError):
            return None

    def write(self, index: IndexData) -> Signature | None:
        atomic_write_bytes(self.path, index.to_bytes())
        index.changed = False
        return self.signature()


class IndexCache:
    """The index as last read or written: re-read (without the lock) only when the file
    changed. `rebuild` makes a new index from the blobs when the file is damaged; that
    needs the lock, and the rebuilt index is written at once."""

    def __init__(self, file: IndexFile, lock: StoreLock, rebuild: Callable[[], IndexData]):
        self.file = file
        self._lock = lock
        self._rebuild = rebuild
        self._signature: Signature | None = None
        self._index = IndexData()

    def current(self) -> IndexData:
        signature = self.file.signature()
        if signature is None:
            return IndexData()
        if signature != self._signature:
            index = self.file.read()
            if index is None:  # damaged: repairing needs the lock
                try:
                    with self._lock.held():
                        index = self.load()
                except OSError as exc:
                    raise SnapshotStoreError(
                        f"snapshot index {self.file.path} is damaged and cannot be rebuilt: {exc.strerror}"
                    ) from None
                self._signature, self._index = None, index
                return index
            self._signature, self._index = signature, index
        return self._index

    def load(self) -> IndexData:
        """Under the lock: the index, fresh from disk; a damaged one is rebuilt from the blobs."""
        index = self.file.read()
        if index is None:
            index = self._rebuild()
            self.write(index)
        return index

    def write(self, index: IndexData) -> None:
        """Under the lock."""
        self._signature, self._index = self.file.write(index), index
