"""Checkpoint states written to the snapshot store on a thread of their own.

A checkpoint's state is copied out of the session on the engine's thread at the turn's
end (Session.snapshot), so it is exactly that turn's state. Writing it is the slow part
(encode, checksums, temp file, fsync, rename, index update: SnapshotStore.put; about
80 ms for the default model's 15-21 MB states) and happens here, off the turn's critical
path. Its key is known before the write (codec.snapshot_key), so the tree names it at
once; whatever uses the store's states waits for the writes first (Checkpointer.settle).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

from effctx_core.contract import SessionSnapshot
from effctx_core.snapshots import EntryInfo, SnapshotStore, save_snapshot

# At most this many states are held for writing, the one being written included: a
# checkpoint that finds them all taken waits until the oldest is on disk. So memory stays
# bounded whatever the disk's speed: a state is 15-21 MB on the default model's agent loop
# (up to ~130 MB at 8k tokens with swa_full), plus one encoded copy of the state being
# written, so at most about three states' worth (~60 MB here) are held at once.
IN_FLIGHT = 2


class StateWriter:
    """One writer thread (started with the first write) and a bounded set of writes."""

    def __init__(self, in_flight: int = IN_FLIGHT):
        self._room = threading.BoundedSemaphore(in_flight)
        self._lock = threading.Lock()
        self._unfinished: set[Future[EntryInfo]] = set()
        # ThreadPoolExecutor's thread, not a daemon: at interpreter exit it finishes the
        # writes queued so far before the process ends, even without a close.
        self._pool: ThreadPoolExecutor | None = None
        # The writer thread's own store handles (a handle's caches are not thread-safe).
        self._twins: dict[Path, SnapshotStore] = {}

    def write(self, store: SnapshotStore, snapshot: SessionSnapshot, meta: dict) -> Future[EntryInfo]:
        """Queue `snapshot` for `store`; waits for room while IN_FLIGHT states are held."""
        self._room.acquire()
        try:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(1, thread_name_prefix="effctx-states")
                future = self._pool.submit(self._save, store, snapshot, meta)
                self._unfinished.add(future)
        except BaseException:
            self._room.release()
            raise
        future.add_done_callback(self._finished)
        return future

    def wait(self) -> None:
        """Until every write queued so far has ended, written or failed. From any thread."""
        with self._lock:
            queued = list(self._unfinished)
        wait(queued)

    def close(self) -> None:
        """The queued writes finish, then the thread ends."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def _finished(self, future: Future[EntryInfo]) -> None:
        with self._lock:
            self._unfinished.discard(future)
        self._room.release()

    def _save(self, store: SnapshotStore, snapshot: SessionSnapshot, meta: dict) -> EntryInfo:
        twin = self._twins.get(store.root)
        if twin is None:
            twin = self._twins[store.root] = store.twin()
        return save_snapshot(twin, snapshot, meta)
