"""A persistent, bounded, content-addressed store of snapshot blobs.

Layout under the root (default: <user cache dir>/snapshots):

    blobs/<key>.snap      one blob per entry (format: blobfile.py); immutable once renamed
    blobs/.<key16>.*.tmp  a blob being written; flock'ed by its writer while alive
    index.json            entries: identity, tokens, size, created, last use, meta; why the
                          last entries let go of are gone: evicted or removed (index.py)
    refs.json             owner (a saved snapshot tree) -> keys it keeps alive (refs.py)
    quarantine/           blobs and files that failed a check, kept for a look (quarantine.py)
    lock                  flock'ed around every index/refs change, eviction, quarantine

Readers never take the lock to look things up: the index is replaced atomically, and a
blob is checked in full before any byte of it is returned. A blob write happens outside
the lock (it is the slow part); only the rename and the index update happen inside it.

The store composes the parts: the files (blobs.py, index.py, refs.py, quarantine.py),
the pure eviction policy (eviction.py), the checks of gc and verify (fsck.py) and the
prefix index of its entries (stored_prefixes.py over prefix_index.py). Every change goes
through one transaction: lock, load, change, write back what changed.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from effctx_core.atomic import fsync_dir
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
    read_blob,
    token_bytes,
)
from effctx_core.snapshots.blobs import BlobFiles, write_error
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
from effctx_core.snapshots.eviction import EvictionPlan, plan_eviction
from effctx_core.snapshots.fsck import check_blobs, check_key, reconcile, reindex
from effctx_core.snapshots.index import EVICTED, REMOVED, IndexCache, IndexData, IndexFile, IndexRecord
from effctx_core.snapshots.quarantine import Quarantine
from effctx_core.snapshots.records import (
    EntryInfo,
    GcReport,
    Peek,
    Quarantined,
    Stored,
    StoreUsage,
    VerifyReport,
)
from effctx_core.snapshots.refs import DamagedRefs, Refs, RefsFile, check_owner
from effctx_core.snapshots.stored_prefixes import StoredPrefixes
from effctx_core.units import format_bytes

__all__ = ["EntryInfo", "GcReport", "Peek", "Quarantined", "SnapshotStore", "StoreUsage", "Stored", "VerifyReport"]

TEMP_GRACE_SECONDS = 60.0
QUARANTINE_KEEP_DAYS = 7.0
_ID = re.compile(r"[0-9a-f]{1,64}")
_GONE_TEXT = {EVICTED: "evicted (store limit)", REMOVED: "removed"}


class SnapshotStore:
    def __init__(self, root: Path | None = None, budget_bytes: int | None = None,
                 *, clock: Callable[[], float] = time.time, files_clock: Callable[[], float] = time.time):
        """`clock` stamps entries (created, last used) and quarantine names; `files_clock` is
        what file ages (temp files of dead writers, quarantine purges) are measured against:
        the clock the file system stamps mtimes with."""
        if root is None:
            from effctx_core.models import cache_dir

            root = cache_dir() / "snapshots"
        self.root = Path(root)
        self._blobs = BlobFiles(self.root)
        self.blobs_dir = self._blobs.dir
        self.quarantine_dir = self.root / "quarantine"
        self.index_path = self.root / "index.json"
        self.refs_path = self.root / "refs.json"
        self._lock = locking.StoreLock(self.root)
        self.lock_path = self._lock.path
        self._refs_file = RefsFile(self.refs_path)
        self._quarantine = Quarantine(self.quarantine_dir, clock)
        self._index = IndexCache(IndexFile(self.index_path), self._lock, self._rebuilt_index)
        self._prefixes = StoredPrefixes(self._blobs.tokens)
        self._clock = clock
        self._files_clock = files_clock
        # Resolve an explicit or environment budget now, so bad input fails at once; the
        # disk-share default needs the index and is computed on first use.
        self._budget: Budget | None = None
        if budget_bytes is not None or os.environ.get(BUDGET_ENV, "").strip():
            self._budget = resolve_budget(budget_bytes, self.root, 0)

    def twin(self) -> SnapshotStore:
        """Another handle on this store's folder and budget, for another thread. A handle's
        in-memory caches (the index as last read, the prefix index) are not thread-safe, so
        each thread keeps its own; the two take turns through the store's lock file, as two
        processes do, and each sees the other's entries when the index file changes."""
        twin = SnapshotStore(self.root, clock=self._clock, files_clock=self._files_clock)
        twin._budget = self._budget
        return twin

    # ----------------------------------------------------------------- budget

    @property
    def budget(self) -> Budget:
        if self._budget is None:
            self._budget = resolve_budget(None, self.root, self._index.current().total_bytes())
        return self._budget

    @property
    def budget_bytes(self) -> int:
        return self.budget.bytes

    # ----------------------------------------------------------------- lookups

    def blob_path(self, key: str) -> Path:
        return self._blobs.path(key)

    def find(self, identity_digest: str, tokens: Sequence[int]) -> str | None:
        """The key of an entry for exactly these tokens under this identity, if any."""
        key = key_for(identity_digest, tokens)
        return key if key in self._index.current().entries else None

    def longest_prefix(self, identity_digest: str, tokens: Sequence[int]) -> tuple[str, int] | None:
        """(key, n) of the entry holding the longest prefix tokens[:n], n >= 1, if any:
        through the prefix index, in time proportional to the blocks of `tokens`."""
        check_identity_digest(identity_digest)
        match = self._prefixes.longest(identity_digest, tokens, self._index.current().entries)
        return None if match is None else (match.value, match.n_tokens)

    def ls(self) -> list[EntryInfo]:
        """Every entry, most recently used first."""
        index = self._index.current()
        owners = self._refs_file.read().by_key()
        order = sorted(index.entries.items(), key=lambda kv: kv[1].use, reverse=True)
        return [_entry(k, r, owners.get(k, ())) for k, r in order]

    def info(self, key: str) -> EntryInfo:
        record = self._index.current().entries.get(key)
        if record is None:
            raise SnapshotNotFoundError(f"no snapshot with key {key}")
        return _entry(key, record, self._refs_file.read().by_key().get(key, ()))

    def usage(self) -> StoreUsage:
        index = self._index.current()
        owners = self._refs_file.read().by_key()
        referenced = sum(r.bytes for k, r in index.entries.items() if k in owners)
        return StoreUsage(str(self.root), len(index.entries), index.total_bytes(), referenced,
                          self.budget.bytes, self.budget.source)

    def resolve(self, id_prefix: str) -> str:
        """The one key starting with `id_prefix` (like git's abbreviated commit ids)."""
        text = id_prefix.strip().lower()
        if not _ID.fullmatch(text):
            raise SnapshotNotFoundError(f"not a snapshot ID: {id_prefix!r} (expected hex digits)")
        matches = sorted(k for k in self._index.current().entries if k.startswith(text))
        if not matches:
            raise SnapshotNotFoundError(f"no snapshot matches ID {text}")
        if len(matches) > 1:
            shown = ", ".join(k[:12] for k in matches[:4]) + (", ..." if len(matches) > 4 else "")
            raise AmbiguousSnapshotIdError(f"snapshot ID {text} is ambiguous: {len(matches)} snapshots start with it ({shown})")
        return matches[0]

    def unique_prefix_length(self, minimum: int = 12) -> int:
        """The shortest ID length (at least `minimum`) that tells every entry apart."""
        keys = sorted(self._index.current().entries)
        longest = max((_common_prefix(a, b) for a, b in zip(keys, keys[1:])), default=0)
        return max(minimum, longest + 1)

    def missing_states(self, keys: Iterable[str]) -> dict[str, str]:
        """Of these keys, the ones the store does not hold, each with why: "quarantined"
        (a check set its blob aside), "evicted (store limit)" (to make room), "removed"
        (by `effctx snapshots rm`, or by the session that made it) or "not in the store"
        (never saved here, or gone too long ago to be remembered). A key is held when the
        index lists it and its blob file is there."""
        index = self._index.current()
        missing = {k: "" for k in keys if k not in index.entries or self._blobs.size(k) is None}
        if missing:
            set_aside = self._quarantine.names()
            for key in missing:
                seen = any(name.startswith(f"{key}{BLOB_SUFFIX}.") for name in set_aside)
                missing[key] = "quarantined" if seen else _GONE_TEXT.get(index.gone.get(key, ""), "not in the store")
        return missing

    def refs_of(self, owner: str) -> tuple[str, ...]:
        return self._refs_file.read().keys_of(owner)

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
        # Best effort: a read-only store still serves reads, it just stops learning LRU order.
        try:
            with self._transaction() as (index, _):
                if key in index.entries:
                    index.touch(key, self._clock())
        except SnapshotError:
            pass
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
            check_owner(owner)
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
        self._plan_to_fit(self._index.current(), self._refs_file.read(), size, keep=key)
        fd, tmp = _write_temp(self._blobs, key, (raw_header, raw_tokens, raw_meta, payload))
        final = self._blobs.path(key)
        renamed = False
        try:
            with self._transaction(refs=True) as (index, refs):
                self._evict(index, self._plan_to_fit(index, refs, size, keep=key))
                os.replace(tmp, final)
                renamed = True
                fsync_dir(self.blobs_dir)
                now = self._clock()
                # The meta as the blob holds it (JSON-normalized), so put and ls agree.
                record = IndexRecord.of(header, json.loads(raw_meta), size, now, now, index.tick())
                index.add(key, record)
                if owner is not None:
                    refs.add(owner, key)
        except SnapshotStoreError:
            if renamed:  # do not leave a blob the index does not know about
                final.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
            Path(tmp).unlink(missing_ok=True)
        self._prefixes.added(key, record, raw_tokens)
        return _entry(key, record, refs.by_key().get(key, ()))

    def rm(self, key: str, force: bool = False) -> EntryInfo | None:
        """Delete an entry; one a saved tree references only with force (dropping the refs).

        Returns what the index knew of it (None for a blob the index did not list).
        """
        with self._transaction(refs=True) as (index, refs):
            record = index.entries.get(key)
            if record is None and not self._blobs.path(key).exists():
                raise SnapshotNotFoundError(f"no snapshot with key {key}")
            owners = refs.by_key().get(key, ())
            if owners and not force:
                raise SnapshotInUseError(
                    f"snapshot {key[:12]} is referenced by {', '.join(owners)}; remove those refs first or force"
                )
            self._blobs.delete([key])
            refs.drop_key(key)
            index.drop(key, REMOVED)
        return _entry(key, record, owners) if record else None

    def add_ref(self, key: str, owner: str) -> None:
        """Keep `key` alive for `owner` (e.g. a saved snapshot tree) until remove_refs."""
        check_owner(owner)
        with self._transaction(refs=True) as (index, refs):
            if key not in index.entries:
                raise SnapshotNotFoundError(f"no snapshot with key {key}")
            refs.add(owner, key)

    def remove_refs(self, owner: str) -> int:
        """Drop every ref `owner` holds; returns how many. The entries become evictable."""
        with self._transaction(index=False, refs=True) as (_, refs):
            return refs.drop_owner(owner)

    def quarantine(self, key: str, reason: str) -> Path | None:
        """Set an entry aside that a caller found unusable (e.g. the runtime refused it)."""
        path = self._blobs.path(key)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return self._set_aside(path, key, BlobDamage("rejected", reason), st)

    # ----------------------------------------------------------------- maintenance

    def gc(self, stale_after: float = TEMP_GRACE_SECONDS, quarantine_days: float = QUARANTINE_KEEP_DAYS) -> GcReport:
        """Evict to budget, remove temp files of dead writers, reconcile index and blobs."""
        mark = len(self._quarantine.log)
        if not self.root.is_dir():
            return GcReport((), 0, (), (), (), (), (), self.usage())
        _ = self.budget  # resolved before the lock: the default budget reads the index
        with self._transaction(refs=True) as (index, refs):
            # Index and refs temp files (atomic_write_bytes) are only written under the lock we hold.
            temps = self._blobs.remove_stale_temps(list(self.root.glob(".*.json.*.tmp")), self._files_clock(),
                                                   stale_after)
            adopted, dropped = reconcile(index, self._blobs, self._quarantine)
            plan = self._plan_to_fit(index, refs, 0, keep=None, strict=False)
            self._evict(index, plan)
            purged = self._quarantine.purge(self._files_clock() - quarantine_days * 86400)
        return GcReport(plan.victims, plan.freed_bytes, temps, adopted, dropped, self._quarantine.since(mark), purged,
                        self.usage())

    def verify(self) -> VerifyReport:
        """Check every blob in full; quarantine the bad ones; make the index agree."""
        mark = len(self._quarantine.log)
        if not self.root.is_dir():
            return VerifyReport(0, 0, (), (), (), (), ())
        refs = self._refs_or_quarantine()
        checked, good = check_blobs(self._blobs, self._set_aside)
        with self._transaction() as (index, _):
            adopted, dropped = reconcile(index, self._blobs, self._quarantine)
            reindexed = reindex(index, good, self._blobs)
        return VerifyReport(checked, len(good), self._quarantine.since(mark), adopted, dropped, reindexed,
                            refs.dangling(index.entries))

    # ----------------------------------------------------------------- internals: the transaction

    @contextmanager
    def _transaction(self, *, index: bool = True, refs: bool = False) -> Iterator[tuple[IndexData, Refs]]:
        """Under the lock: the index and refs fresh from disk (each when asked for), to
        change; what changed is written back when the block ends without an error. Refs
        first: a crash between the two writes leaves a ref to a blob that is not indexed
        yet (harmless), never an unprotected entry. An OSError is one line naming the store."""
        try:
            with self._lock.held():
                data = self._index.load() if index else IndexData()
                table = self._refs_file.read() if refs else Refs()
                yield data, table
                if table.changed:
                    self._refs_file.write(table)
                if data.changed:
                    self._index.write(data)
        except OSError as exc:
            raise write_error(self.root, exc) from None

    def _plan_to_fit(self, index: IndexData, refs: Refs, incoming: int, keep: str | None,
                     strict: bool = True) -> EvictionPlan:
        plan = plan_eviction(index.entries, refs.by_key(), incoming, self.budget.bytes, keep)
        if strict and not plan.fits:
            raise SnapshotBudgetError(
                f"a {format_bytes(incoming)} snapshot does not fit: saved snapshot trees reference "
                f"{format_bytes(plan.kept_bytes)} of the {format_bytes(plan.budget)} snapshot budget "
                f"({self.budget.source}); raise {BUDGET_ENV} or delete saved trees"
            )
        return plan

    def _evict(self, index: IndexData, plan: EvictionPlan) -> None:
        self._blobs.delete(plan.victims)
        for key in plan.victims:
            index.drop(key, EVICTED)

    # ----------------------------------------------------------------- internals: index, refs

    def _rebuilt_index(self) -> IndexData:
        """Under the lock: the damaged index set aside, a new one made from the blobs."""
        self._quarantine.move(self.index_path, BlobDamage("damaged", "index file damaged; rebuilt from the blobs"))
        index = IndexData()
        reconcile(index, self._blobs, self._quarantine)
        return index

    def _refs_or_quarantine(self) -> Refs:
        try:
            return self._refs_file.read()
        except DamagedRefs:
            pass
        try:
            with self._lock.held():
                self._quarantine.move(self.refs_path, BlobDamage(
                    "damaged", "refs file damaged; saved trees no longer protect their snapshots"))
        except OSError as exc:
            raise write_error(self.root, exc) from None
        return Refs()

    # ----------------------------------------------------------------- internals: blobs

    def _read_checked(self, key: str, want_payload: bool) -> tuple[BlobContents, int]:
        if not is_digest(key):
            raise SnapshotNotFoundError(f"not a snapshot key: {key!r}")
        path = self._blobs.path(key)
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
                check_key(contents, key)
            except BlobDamage as damage:
                raise CorruptSnapshotError(key, damage.reason, self._set_aside(path, key, damage, st)) from None
            except OSError as exc:  # EIO from a failing disk: the blob is not usable
                unreadable = BlobDamage("unreadable", f"unreadable: {exc.strerror}")
                raise CorruptSnapshotError(key, unreadable.reason, self._set_aside(path, key, unreadable, st)) from None
        return contents, st.st_size

    def _set_aside(self, path: Path, name: str, damage: BlobDamage, seen: os.stat_result) -> Path | None:
        """Move a bad file to the quarantine, unless it was replaced since it was read."""
        try:
            with self._lock.held():
                try:
                    now = os.stat(path)
                except FileNotFoundError:
                    return None
                if (now.st_ino, now.st_dev) != (seen.st_ino, seen.st_dev):
                    return None  # a fresh put replaced it: that file is not the bad one
                dest = self._quarantine.move(path, damage)
                index = self._index.load()
                if is_digest(name) and index.drop(name) is not None:
                    self._index.write(index)
        except OSError:
            # A read-only store: the damage is still reported, nothing is moved.
            self._quarantine.note(path, damage)
            return None
        return dest

    def _forget(self, key: str) -> None:
        """Drop the index entry of a blob that is gone (evicted by another process)."""
        if key not in self._index.current().entries:
            return
        try:
            with self._transaction() as (index, _):
                if key in index.entries and not self._blobs.path(key).exists():
                    index.drop(key)
        except SnapshotError:
            pass


# --------------------------------------------------------------------------- helpers


def _write_parts(fd: int, parts: Sequence[bytes | memoryview]) -> None:
    for part in parts:
        view = memoryview(part).cast("B")
        while view:
            written = os.write(fd, view[: 8 << 20])
            view = view[written:]


def _write_temp(blobs: BlobFiles, key: str, parts: Sequence[bytes | memoryview]) -> tuple[int, str]:
    """The blob, complete and fsynced, in a temp file this process holds a flock on."""
    try:
        blobs.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=blobs.dir, prefix=f".{key[:16]}.", suffix=".tmp")
    except OSError as exc:
        raise write_error(blobs.root, exc) from None
    try:
        locking.lock_fd(fd)
        _write_parts(fd, parts)
        os.fsync(fd)
    except BaseException as exc:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise write_error(blobs.root, exc) from None
        raise
    return fd, tmp


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _entry(key: str, record: IndexRecord, refs: tuple[str, ...]) -> EntryInfo:
    return EntryInfo(key, record.identity, record.n_tokens, record.token_hash, record.bytes,
                     float(record.created), float(record.last_used), tuple(refs), dict(record.meta))
