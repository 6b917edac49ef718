"""Advisory file locks (flock) shared by every process using one store directory.

flock locks belong to an open file description and die with the process, so a writer
killed mid-way never leaves a lock behind, and a lock a live writer holds on its temp
file tells gc that the file is still being written.
"""

from __future__ import annotations

import fcntl
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def exclusive(lock_path: Path) -> Iterator[None]:
    """Hold the store lock: index/refs read-modify-write, eviction, quarantine moves."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def lock_fd(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def held_by_someone(path: Path) -> bool:
    """True if another open file description holds a flock on `path`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class StoreLock:
    """The store's lock file, held around every index/refs change, eviction and
    quarantine move. Re-entrant within this object and its threads: a flock on a second
    descriptor of the lock file would wait for ourselves."""

    def __init__(self, root: Path):
        self.root = root
        self.path = root / "lock"
        self._thread_lock = threading.RLock()
        self._depth = 0

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._thread_lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            self.root.mkdir(parents=True, exist_ok=True)
            with exclusive(self.path):
                self._depth = 1
                try:
                    yield
                finally:
                    self._depth = 0
