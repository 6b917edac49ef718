"""A persistent, bounded, content-addressed store of snapshot blobs.

Layout under the root (default: <user cache dir>/snapshots):

    blobs/<key>.snap      one blob per entry (format: blobfile.py); immutable once renamed
    blobs/.<key16>.*.tmp  a blob being written; flock'ed by its writer while alive
    index.json            entries: identity, tokens, size, created, last use, meta
    refs.json             owner (a saved snapshot tree) -> keys it keeps alive
    quarantine/           blobs and files that failed a check, kept for a look
    lock                  flock'ed around every index/refs change, eviction, quarantine

Readers never take the lock to look things up: the index is replaced atomically, and a
blob is checked in full before any byte of it is returned. A blob write happens outside
the lock (it is the slow part); only the rename and the index update happen inside it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from effctx_core.atomic import atomic_write_bytes, fsync_dir
from effctx_core.snapshots import locking
from effctx_core.snapshots.blobfile import (
    BLOB_SUFFIX,
    HEADER_BYTES,
    BlobContents,
    BlobDamage,
    build_header,
    check_identity_digest,
    encode_meta,
    is_digest,
    key_for,
    parse_header,
    prefix_hashes,
    read_blob,
    read_summary,
    token_bytes,
)
from effctx_core.snapshots.budget import BUDGET_ENV, Budget, resolve_budget
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
from effctx_core.snapshots.index import IndexData, make_record, owners_by_key, refs_from_bytes, refs_to_bytes
from effctx_core.snapshots.records import (
    EntryInfo,
    GcReport,
    Peek,
    Quarantined,
    Stored,
    StoreUsage,
    VerifyReport,
)
from effctx_core.units import format_bytes

TEMP_GRACE_SECONDS = 60.0
QUARANTINE_KEEP_DAYS = 7.0
_ID = re.compile(r"[0-9a-f]{1,64}")


@dataclass(frozen=True)
class _View:  # not a NamedTuple: its `index` would shadow tuple.index
    signature: tuple | None
    index: IndexData
    prefixes: dict[str, dict[int, dict[str, str]]]


# --------------------------------------------------------------------------- the store


class SnapshotStore:
    def __init__(self, root: Path | None = None, budget_bytes: int | None = None,
                 *, clock: Callable[[], float] = time.time):
        if root is None:
            from effctx_core.models import cache_dir

            root = cache_dir() / "snapshots"
        self.root = Path(root)
        self.blobs_dir = self.root / "blobs"
        self.quarantine_dir = self.root / "quarantine"
        self.index_path = self.root / "index.json"
        self.refs_path = self.root / "refs.json"
        self.lock_path = self.root / "lock"
        self._clock = clock
        # Resolve an explicit or environment budget now, so bad input fails at once; the
        # disk-share default needs the index and is computed on first use.
        self._budget: Budget | None = None
        if budget_bytes is not None or os.environ.get(BUDGET_ENV, "").strip():
            self._budget = resolve_budget(budget_bytes, self.root, 0)
        self._view = _View(None, IndexData(), {})
        self._quarantine_log: list[Quarantined] = []
        self._thread_lock = threading.RLock()
        self._lock_depth = 0

    # ----------------------------------------------------------------- budget

    @property
    def budget(self) -> Budget:
        if self._budget is None:
            self._budget = resolve_budget(None, self.root, self._current().index.total_bytes())
        return self._budget

    @property
    def budget_bytes(self) -> int:
        return self.budget.bytes

    # ----------------------------------------------------------------- lookups

    def blob_path(self, key: str) -> Path:
        return self.blobs_dir / f"{key}{BLOB_SUFFIX}"

    def find(self, identity_digest: str, tokens: Sequence[int]) -> str | None:
        """The key of an entry for exactly these tokens under this identity, if any."""
        key = key_for(identity_digest, tokens)
        return key if key in self._current().index.entries else None

    def longest_prefix(self, identity_digest: str, tokens: Sequence[int]) -> tuple[str, int] | None:
        """(key, n) of the entry holding the longest prefix tokens[:n], n >= 1, if any."""
        check_identity_digest(identity_digest)
        by_length = self._current().prefixes.get(identity_digest, {})
        lengths = [n for n in by_length if 1 <= n <= len(tokens)]
        if not lengths:
            return None
        hashes = prefix_hashes(tokens[: max(lengths)], lengths)
        for n in sorted(lengths, reverse=True):
            key = by_length[n].get(hashes[n])
            if key is not None:
                return key, n
        return None

    def ls(self) -> list[EntryInfo]:
        """Every entry, most recently used first."""
        index = self._current().index
        owners = owners_by_key(self._read_refs())
        order = sorted(index.entries.items(), key=lambda kv: kv[1]["use"], reverse=True)
        return [_entry(k, r, owners.get(k, ())) for k, r in order]

    def info(self, key: str) -> EntryInfo:
        record = self._current().index.entries.get(key)
        if record is None:
            raise SnapshotNotFoundError(f"no snapshot with key {key}")
        return _entry(key, record, owners_by_key(self._read_refs()).get(key, ()))

    def usage(self) -> StoreUsage:
        index = self._current().index
        owners = owners_by_key(self._read_refs())
        referenced = sum(r["bytes"] for k, r in index.entries.items() if k in owners)
        return StoreUsage(str(self.root), len(index.entries), index.total_bytes(), referenced,
                          self.budget.bytes, self.budget.source)

    def resolve(self, id_prefix: str) -> str:
        """The one key starting with `id_prefix` (like git's abbreviated commit ids)."""
        text = id_prefix.strip().lower()
        if not _ID.fullmatch(text):
            raise SnapshotNotFoundError(f"not a snapshot ID: {id_prefix!r} (expected hex digits)")
        matches = sorted(k for k in self._current().index.entries if k.startswith(text))
        if not matches:
            raise SnapshotNotFoundError(f"no snapshot matches ID {text}")
        if len(matches) > 1:
            shown = ", ".join(k[:12] for k in matches[:4]) + (", ..." if len(matches) > 4 else "")
            raise AmbiguousSnapshotIdError(f"snapshot ID {text} is ambiguous: {len(matches)} snapshots start with it ({shown})")
        return matches[0]

    def unique_prefix_length(self, minimum: int = 12) -> int:
        """The shortest ID length (at least `minimum`) that tells every entry apart."""
        keys = sorted(self._current().index.entries)
        longest = max((_common_prefix(a, b) for a, b in zip(keys, keys[1:])), default=0)
        return max(minimum, longest + 1)

    # ----------------------------------------------------------------- reads

    def get(self, key: str, expected_identity_digest: str) -> Stored:
        """Tokens, payload and meta of an entry, after every check has passed.

        Raises SnapshotNotFoundError, CorruptSnapshotError (the blob is quarantined) or
        ForeignSnapshotError (a valid blob of another runtime identity; left alone).
        """
        check_identity_digest(expected_identity_digest)
        contents, _ = self._read_checked(key, want_payload=True)
        if contents.header.identity != expected_identity_digest:
            raise ForeignSnapshotError(key, expected_identity_digest, contents.header.identity)
        self._touch(key)
        assert contents.payload is not None
        return Stored(contents.tokens, contents.payload, contents.meta)

    def peek(self, key: str) -> Peek:
        """A checked read that expects no identity and does not count as a use."""
        contents, size = self._read_checked(key, want_payload=True)
        assert contents.payload is not None
        return Peek(key, contents.header.identity, contents.tokens, contents.meta, contents.payload, size)

    # ----------------------------------------------------------------- writes

    def put(self, identity_digest: str, tokens: Sequence[int], payload: bytes | memoryview,
            meta: dict | None = None, *, owner: str | None = None) -> EntryInfo:
        """Store a payload for (identity, tokens); evicts least recently used entries to fit.

        With `owner`, the entry is referenced by it in the same locked step, so no other
        process can evict it between the put and an add_ref.
        """
        check_identity_digest(identity_digest)
        if owner is not None:
            _check_owner(owner)
        raw_tokens = token_bytes(tokens)
        raw_meta = encode_meta(meta)
        payload = memoryview(payload).cast("B")
        size = HEADER_BYTES + len(raw_tokens) + len(raw_meta) + len(payload)
        raw_header = build_header(identity_digest, raw_tokens, raw_meta, payload)
        header = parse_header(raw_header, size)
        key = header.key
        budget = self.budget
        if size > budget.bytes:
            raise SnapshotBudgetError(
                f"a {format_bytes(size)} snapshot does not fit the {format_bytes(budget.bytes)} snapshot budget "
                f"({budget.source}); raise {BUDGET_ENV}"
            )
        # Cheap early refusal before writing what may be hundreds of MB; the locked
        # check below is the one that counts.
        self._plan_eviction(self._current().index, self._read_refs(), size, keep=key, strict=True)
        fd, tmp = self._write_temp(key, (raw_header, raw_tokens, raw_meta, payload))
        final = self.blob_path(key)
        renamed = False
        try:
            with self._locked():
                index = self._load_index()
                refs = self._read_refs()
                self._evict(index, self._plan_eviction(index, refs, size, keep=key, strict=True))
                os.replace(tmp, final)
                renamed = True
                fsync_dir(self.blobs_dir)
                now = self._clock()
                # The meta as the blob holds it (JSON-normalized), so put and ls agree.
                index.entries[key] = make_record(header, json.loads(raw_meta), size, now, now, index.tick())
                if owner is not None:
                    refs.setdefault(owner, [])
                    if key not in refs[owner]:
                        refs[owner].append(key)
                    # Refs first: a crash between the two writes leaves a ref to a blob
                    # that is not indexed yet (harmless), never an unprotected entry.
                    self._write_refs(refs)
                self._write_index(index)
                record = index.entries[key]
        except OSError as exc:
            if renamed:  # do not leave a blob the index does not know about
                final.unlink(missing_ok=True)
            raise self._write_error(exc) from None
        finally:
            os.close(fd)
            Path(tmp).unlink(missing_ok=True)
        return _entry(key, record, owners_by_key(refs).get(key, ()))

    def rm(self, key: str, force: bool = False) -> EntryInfo | None:
        """Delete an entry; one a saved tree references only with force (dropping the refs).

        Returns what the index knew of it (None for a blob the index did not list).
        """
        try:
            with self._locked():
                index = self._load_index()
                refs = self._read_refs()
                record = index.entries.get(key)
                path = self.blob_path(key)
                if record is None and not path.exists():
                    raise SnapshotNotFoundError(f"no snapshot with key {key}")
                owners = owners_by_key(refs).get(key, ())
                if owners and not force:
                    raise SnapshotInUseError(
                        f"snapshot {key[:12]} is referenced by {', '.join(owners)}; remove those refs first or force"
                    )
                path.unlink(missing_ok=True)
                fsync_dir(self.blobs_dir)
                info = _entry(key, record, owners) if record else None
                if owners:
                    for owner in owners:
                        refs[owner] = [k for k in refs[owner] if k != key]
                    self._write_refs(refs)
                if record is not None:
                    del index.entries[key]
                    self._write_index(index)
        except OSError as exc:
            raise self._write_error(exc) from None
        return info

    def add_ref(self, key: str, owner: str) -> None:
        """Keep `key` alive for `owner` (e.g. a saved snapshot tree) until remove_refs."""
        _check_owner(owner)
        try:
            with self._locked():
                if key not in self._load_index().entries:
                    raise SnapshotNotFoundError(f"no snapshot with key {key}")
                refs = self._read_refs()
                keys = refs.setdefault(owner, [])
                if key not in keys:
                    keys.append(key)
                    self._write_refs(refs)
        except OSError as exc:
            raise self._write_error(exc) from None

    def remove_refs(self, owner: str) -> int:
        """Drop every ref `owner` holds; returns how many. The entries become evictable."""
        try:
            with self._locked():
                refs = self._read_refs()
                removed = len(refs.pop(owner, []))
                if removed:
                    self._write_refs(refs)
        except OSError as exc:
            raise self._write_error(exc) from None
        return removed

    def missing_states(self, keys: Iterable[str]) -> dict[str, str]:
        """Of these keys, the ones the store does not hold, each with why: "quarantined"
        (a check set its blob aside) or "not in the store" (removed, or never saved here).
        A key is held when the index lists it and its blob file is there."""
        entries = self._current().index.entries
        missing = {k: "" for k in keys if k not in entries or _size_or_none(self.blob_path(k)) is None}
        if missing:
            try:
                set_aside = [p.name for p in self.quarantine_dir.iterdir()]
            except OSError:
                set_aside = []
            for key in missing:
                seen = any(name.startswith(f"{key}{BLOB_SUFFIX}.") for name in set_aside)
                missing[key] = "quarantined" if seen else "not in the store"
        return missing

    def refs_of(self, owner: str) -> tuple[str, ...]:
        return tuple(sorted(self._read_refs().get(owner, [])))

    def quarantine(self, key: str, reason: str) -> Path | None:
        """Set an entry aside that a caller found unusable (e.g. the runtime refused it)."""
        path = self.blob_path(key)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return self._quarantine(path, key, BlobDamage("rejected", reason), st)

    # ----------------------------------------------------------------- maintenance

    def gc(self, stale_after: float = TEMP_GRACE_SECONDS, quarantine_days: float = QUARANTINE_KEEP_DAYS) -> GcReport:
        """Evict to budget, remove temp files of dead writers, reconcile index and blobs."""
        log_start = len(self._quarantine_log)
        if not self.root.is_dir():
            return GcReport((), 0, (), (), (), (), (), self.usage())
        _ = self.budget  # resolved before the lock: the default budget reads the index
        try:
            with self._locked():
                temps = self._remove_stale_temps(stale_after)
                index = self._load_index()
                refs = self._read_refs()
                adopted, dropped = self._reconcile(index)
                evict = self._plan_eviction(index, refs, 0, keep=None, strict=False)
                freed = self._evict(index, evict)
                if adopted or dropped or evict:
                    self._write_index(index)
                purged = self._purge_quarantine(quarantine_days)
        except OSError as exc:
            raise self._write_error(exc) from None
        return GcReport(tuple(evict), freed, temps, adopted, dropped,
                        tuple(self._quarantine_log[log_start:]), purged, self.usage())

    def verify(self) -> VerifyReport:
        """Check every blob in full; quarantine the bad ones; make the index agree."""
        log_start = len(self._quarantine_log)
        if not self.root.is_dir():
            return VerifyReport(0, 0, (), (), (), (), ())
        refs = self._refs_or_quarantine()
        checked = 0
        headers = {}
        for path in self._blob_dir_files():
            name = path.name
            if _is_temp(name):
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
                    _check_key(contents, key)
                    headers[key] = contents
                except BlobDamage as damage:
                    self._quarantine(path, key or name, damage, st)
                except OSError as exc:
                    self._quarantine(path, key or name, BlobDamage("unreadable", f"unreadable: {exc.strerror}"), st)
        try:
            with self._locked():
                index = self._load_index()
                adopted, dropped = self._reconcile(index)
                reindexed = []
                for key, contents in headers.items():
                    record = index.entries.get(key)
                    size = _size_or_none(self.blob_path(key))
                    if record is None or size is None:
                        continue
                    h = contents.header
                    if (record["identity"], record["n_tokens"], record["token_hash"], record["bytes"], record["meta"]) != (
                        h.identity, h.n_tokens, h.token_hash, size, contents.meta
                    ):
                        index.entries[key] = make_record(h, contents.meta, size, record["created"],
                                                         record["last_used"], record["use"])
                        reindexed.append(key)
                if adopted or dropped or reindexed:
                    self._write_index(index)
        except OSError as exc:
            raise self._write_error(exc) from None
        dangling = tuple(sorted((o, k) for o, keys in refs.items() for k in keys if k not in index.entries))
        quarantined = tuple(self._quarantine_log[log_start:])
        return VerifyReport(checked, len(headers), quarantined, adopted, dropped, tuple(reindexed), dangling)

    # ----------------------------------------------------------------- internals: files

    @contextmanager
    def _locked(self) -> Iterator[None]:
        # Re-entrant within this object: flock on a second descriptor of the lock file
        # would wait for ourselves.
        with self._thread_lock:
            if self._lock_depth:
                self._lock_depth += 1
                try:
                    yield
                finally:
                    self._lock_depth -= 1
                return
            self.root.mkdir(parents=True, exist_ok=True)
            with locking.exclusive(self.lock_path):
                self._lock_depth = 1
                try:
                    yield
                finally:
                    self._lock_depth = 0

    def _write_error(self, exc: OSError) -> SnapshotStoreError:
        return SnapshotStoreError(f"cannot write snapshot store at {self.root}: {exc.strerror or exc}")

    def _write_temp(self, key: str, parts: Sequence[bytes | memoryview]) -> tuple[int, str]:
        """The blob, complete and fsynced, in a temp file this process holds a flock on."""
        try:
            self.blobs_dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.blobs_dir, prefix=f".{key[:16]}.", suffix=".tmp")
        except OSError as exc:
            raise self._write_error(exc) from None
        try:
            locking.lock_fd(fd)
            _write_parts(fd, parts)
            os.fsync(fd)
        except BaseException as exc:
            os.close(fd)
            Path(tmp).unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise self._write_error(exc) from None
            raise
        return fd, tmp

    def _blob_dir_files(self) -> list[Path]:
        try:
            return sorted(self.blobs_dir.iterdir())
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise SnapshotStoreError(f"cannot read snapshot store at {self.root}: {exc.strerror}") from None

    def _read_checked(self, key: str, want_payload: bool) -> tuple[BlobContents, int]:
        if not is_digest(key):
            raise SnapshotNotFoundError(f"not a snapshot key: {key!r}")
        path = self.blob_path(key)
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            self._forget(key)
            raise SnapshotNotFoundError(f"no snapshot with key {key}") from None
        except OSError as exc:
            raise SnapshotStoreError(f"cannot read snapshot {path}: {exc.strerror}") from None
        with f:
            st = os.fstat(f.fileno())
            try:
                contents = read_blob(f, want_payload)
                _check_key(contents, key)
            except BlobDamage as damage:
                raise CorruptSnapshotError(key, damage.reason, self._quarantine(path, key, damage, st)) from None
            except OSError as exc:  # EIO from a failing disk: the blob is not usable
                unreadable = BlobDamage("unreadable", f"unreadable: {exc.strerror}")
                raise CorruptSnapshotError(key, unreadable.reason, self._quarantine(path, key, unreadable, st)) from None
        return contents, st.st_size

    def _quarantine(self, path: Path, name: str, damage: BlobDamage, seen: os.stat_result) -> Path | None:
        """Move a bad file aside, unless it was replaced since it was read."""
        try:
            with self._locked():
                try:
                    now = os.stat(path)
                except FileNotFoundError:
                    return None
                if (now.st_ino, now.st_dev) != (seen.st_ino, seen.st_dev):
                    return None  # a fresh put replaced it: that file is not the bad one
                dest = self._move_to_quarantine(path, damage)
                key = name if is_digest(name) else None
                index = self._load_index()
                if key and key in index.entries:
                    del index.entries[key]
                    self._write_index(index)
        except OSError:
            # A read-only store: the damage is still reported, nothing is moved.
            self._quarantine_log.append(Quarantined(path.name, damage.reason, ""))
            return None
        return dest

    def _move_to_quarantine(self, path: Path, damage: BlobDamage) -> Path:
        self.quarantine_dir.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        dest = self.quarantine_dir / f"{path.name}.{stamp}.{damage.slug}"
        n = 1
        while dest.exists():
            n += 1
            dest = self.quarantine_dir / f"{path.name}.{stamp}.{damage.slug}.{n}"
        os.replace(path, dest)
        fsync_dir(path.parent)
        fsync_dir(self.quarantine_dir)
        self._quarantine_log.append(Quarantined(path.name, damage.reason, str(dest)))
        return dest

    def _forget(self, key: str) -> None:
        """Drop the index entry of a blob that is gone (evicted by another process)."""
        if key not in self._current().index.entries:
            return
        try:
            with self._locked():
                index = self._load_index()
                if key in index.entries and not self.blob_path(key).exists():
                    del index.entries[key]
                    self._write_index(index)
        except (OSError, SnapshotError):
            pass

    def _touch(self, key: str) -> None:
        # Best effort: a read-only store still serves reads, it just stops learning LRU order.
        try:
            with self._locked():
                index = self._load_index()
                record = index.entries.get(key)
                if record is not None:
                    record["use"] = index.tick()
                    record["last_used"] = self._clock()
                    self._write_index(index)
        except (OSError, SnapshotError):
            pass

    def _remove_stale_temps(self, stale_after: float) -> tuple[str, ...]:
        now = time.time()
        removed = []
        candidates = [p for p in self._blob_dir_files() if _is_temp(p.name)]
        # Index and refs temp files (atomic_write_bytes) are only written under the lock we hold.
        candidates += [p for p in self.root.glob(".*.json.*.tmp")]
        for path in candidates:
            try:
                age = now - path.stat().st_mtime
            except FileNotFoundError:
                continue
            # A live writer holds a flock on its temp file however long it takes.
            if age < stale_after or locking.held_by_someone(path):
                continue
            path.unlink(missing_ok=True)
            removed.append(path.name)
        return tuple(removed)

    def _purge_quarantine(self, days: float) -> tuple[str, ...]:
        if not self.quarantine_dir.is_dir():
            return ()
        cutoff = time.time() - days * 86400
        purged = []
        for path in sorted(self.quarantine_dir.iterdir()):
            if path.stat().st_mtime < cutoff:
                path.unlink(missing_ok=True)
                purged.append(path.name)
        return tuple(purged)

    # ----------------------------------------------------------------- internals: index

    def _current(self) -> _View:
        """The index as last written, re-read only when the file changed (no lock)."""
        try:
            st = self.index_path.stat()
        except (FileNotFoundError, NotADirectoryError):  # no store here (yet)
            return _View(None, IndexData(), {})
        except OSError as exc:
            raise SnapshotStoreError(f"cannot read snapshot index {self.index_path}: {exc.strerror}") from None
        signature = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if signature != self._view.signature:
            index = self._parse_index()
            if index is None:  # damaged: repairing needs the lock
                try:
                    with self._locked():
                        index = self._load_index()
                except OSError as exc:
                    raise SnapshotStoreError(
                        f"snapshot index {self.index_path} is damaged and cannot be rebuilt: {exc.strerror}"
                    ) from None
                self._view = _View(None, index, index.prefix_map())
                return self._view
            self._view = _View(signature, index, index.prefix_map())
        return self._view

    def _parse_index(self) -> IndexData | None:
        try:
            raw = self.index_path.read_bytes()
        except FileNotFoundError:
            return IndexData()
        except OSError as exc:
            raise SnapshotStoreError(f"cannot read snapshot index {self.index_path}: {exc.strerror}") from None
        try:
            return IndexData.from_bytes(raw)
        except (ValueError, UnicodeDecodeError):
            return None

    def _load_index(self) -> IndexData:
        """Under the lock: the index, fresh from disk; a damaged one is rebuilt from the blobs."""
        index = self._parse_index()
        if index is None:
            self._move_to_quarantine(self.index_path, BlobDamage("damaged", "index file damaged; rebuilt from the blobs"))
            index = IndexData()
            self._reconcile(index)
            self._write_index(index)
        return index

    def _write_index(self, index: IndexData) -> None:
        atomic_write_bytes(self.index_path, index.to_bytes())
        st = self.index_path.stat()
        self._view = _View((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns), index, index.prefix_map())

    def _reconcile(self, index: IndexData) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Under the lock: make the index list exactly the blobs on disk."""
        on_disk = {p.name[: -len(BLOB_SUFFIX)]: p for p in self._blob_dir_files()
                   if p.name.endswith(BLOB_SUFFIX) and is_digest(p.name[: -len(BLOB_SUFFIX)])}
        dropped = tuple(sorted(k for k in index.entries if k not in on_disk))
        for key in dropped:
            del index.entries[key]
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
                        raise BlobDamage("key-mismatch", _mismatch(key, header.key))
                except BlobDamage as damage:
                    self._move_to_quarantine(path, damage)
                    continue
            # Found without an entry: its writer died between rename and index update.
            # Nothing says it was used recently, so it goes first under LRU.
            index.entries[key] = make_record(header, meta, st.st_size, st.st_mtime, st.st_mtime, 0)
            adopted.append(key)
        return tuple(adopted), dropped

    def _plan_eviction(self, index: IndexData, refs: dict[str, list[str]], incoming: int,
                       keep: str | None, strict: bool) -> list[str]:
        """Least recently used unreferenced keys whose removal makes `incoming` fit."""
        budget = self.budget.bytes
        total = index.total_bytes(skip=keep)
        if total + incoming <= budget:
            return []
        referenced = set(owners_by_key(refs))
        victims = []
        for key, record in sorted(index.entries.items(), key=lambda kv: kv[1]["use"]):
            if total + incoming <= budget:
                break
            if key == keep or key in referenced:
                continue
            victims.append(key)
            total -= record["bytes"]
        if strict and total + incoming > budget:
            raise SnapshotBudgetError(
                f"a {format_bytes(incoming)} snapshot does not fit: saved snapshot trees reference "
                f"{format_bytes(total)} of the {format_bytes(budget)} snapshot budget ({self.budget.source}); "
                f"raise {BUDGET_ENV} or delete saved trees"
            )
        return victims

    def _evict(self, index: IndexData, keys: list[str]) -> int:
        freed = 0
        for key in keys:
            self.blob_path(key).unlink(missing_ok=True)
            freed += index.entries.pop(key)["bytes"]
        if keys:
            fsync_dir(self.blobs_dir)
        return freed

    # ----------------------------------------------------------------- internals: refs

    def _read_refs(self) -> dict[str, list[str]]:
        try:
            raw = self.refs_path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return {}
        except OSError as exc:
            raise SnapshotStoreError(f"cannot read snapshot refs {self.refs_path}: {exc.strerror}") from None
        try:
            return refs_from_bytes(raw)
        except (ValueError, UnicodeDecodeError):
            # Refs cannot be rebuilt: refuse to guess which entries are protected.
            raise _DamagedRefs(
                f"snapshot refs file {self.refs_path} is damaged; `effctx snapshots verify` sets it aside "
                "(saved trees then no longer protect their snapshots from eviction)"
            ) from None

    def _refs_or_quarantine(self) -> dict[str, list[str]]:
        try:
            return self._read_refs()
        except _DamagedRefs:
            pass
        try:
            with self._locked():
                self._move_to_quarantine(self.refs_path, BlobDamage(
                    "damaged", "refs file damaged; saved trees no longer protect their snapshots"))
        except OSError as exc:
            raise self._write_error(exc) from None
        return {}

    def _write_refs(self, refs: dict[str, list[str]]) -> None:
        atomic_write_bytes(self.refs_path, refs_to_bytes(refs))


# --------------------------------------------------------------------------- helpers


def _write_parts(fd: int, parts: Sequence[bytes | memoryview]) -> None:
    for part in parts:
        view = memoryview(part).cast("B")
        while view:
            written = os.write(fd, view[: 8 << 20])
            view = view[written:]


class _DamagedRefs(SnapshotStoreError):
    pass


def _check_key(contents: BlobContents, key: str) -> None:
    if contents.header.key != key:
        raise BlobDamage("key-mismatch", _mismatch(key, contents.header.key))


def _mismatch(name_key: str, header_key: str) -> str:
    return (f"the file name says key {name_key[:12]}, its header's identity and tokens give "
            f"{header_key[:12]}")


def _check_owner(owner: str) -> None:
    if not isinstance(owner, str) or not owner.strip():
        raise SnapshotError("a snapshot ref owner must be a non-empty string")


def _is_temp(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")


def _size_or_none(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _entry(key: str, record: dict, refs: tuple[str, ...]) -> EntryInfo:
    return EntryInfo(key, record["identity"], record["n_tokens"], record["token_hash"], record["bytes"],
                     float(record["created"]), float(record["last_used"]), tuple(refs), dict(record["meta"]))
