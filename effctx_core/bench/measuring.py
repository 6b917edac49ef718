"""Which effctx processes are measuring on this machine now, and the machine's load.

Timing figures are only true when nothing else competes for the cores; two effctx
measurements at once each measure against the other. So every process that measures
(`effctx certify`, the timing `effctx bench` commands, the console's benchmark) registers
itself for the duration of its measurement: one file per measurement in
<user cache dir>/measuring/ (EFFCTX_MEASURING moves it), holding its pid and what it
runs, flock-held while it measures. A flock dies with its process, so the file of a
killed process is seen as stale (and removed) by the next reader, and a live one is
never missed. `Watch` samples the others while a stage runs.

`hold` is the same record as an exclusive lock: a lock file with its holder's pid and
what it does written inside, so a second process that finds it taken can name it.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from effctx_core import models
from effctx_core.errors import EffctxError
from effctx_core.snapshots.locking import lock_fd
from effctx_core.user_files import os_reason

ROOT_ENV = "EFFCTX_MEASURING"
_SUFFIX = ".json"
# How long a reader waits for the holder of a lock it just found taken to write its name.
_HOLDER_WAIT_S = 0.5


def registry_dir() -> Path:
    """Looked up on every call, so it follows the platform dirs and EFFCTX_MEASURING."""
    override = os.environ.get(ROOT_ENV)
    return Path(override).expanduser() if override else models.cache_dir() / "measuring"


@dataclass(frozen=True)
class Measurement:
    """One process's measurement: its pid, what it runs and since when (epoch seconds)."""

    pid: int
    what: str
    since: float

    def describe(self) -> str:
        """`pid 4242 since 14:03 (effctx bench overhead)`, in local time."""
        return f"pid {self.pid} since {time.strftime('%H:%M', time.localtime(self.since))} ({self.what})"

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def decode(cls, data: bytes) -> Measurement | None:
        """The record a file holds; None for anything else (a file still being written)."""
        try:
            raw = json.loads(data)
            record = cls(raw["pid"], raw["what"], raw["since"])
        except (ValueError, TypeError, KeyError):
            return None
        valid = (isinstance(record.pid, int) and isinstance(record.what, str)
                 and isinstance(record.since, (int, float)))
        return record if valid else None


def _now(what: str) -> Measurement:
    return Measurement(os.getpid(), what, time.time())


# --------------------------------------------------------------------------- the registry


@contextmanager
def measuring(what: str) -> Iterator[Measurement]:
    """Register this process as measuring `what` until the block ends."""
    root = registry_dir()
    me = _now(what)
    name = f"{me.pid}-{secrets.token_hex(4)}{_SUFFIX}"
    # Written and locked under a hidden name, then renamed into place: a reader never
    # sees the file of a live measurement unlocked or empty.
    hidden = root / f".{name}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise EffctxError(f"cannot note this measurement in {root}, where effctx measurements see each other: "
                          f"{os_reason(exc)}") from None
    try:
        lock_fd(fd)
        os.write(fd, me.encode())
        os.rename(hidden, root / name)
        yield me
    finally:
        (root / name).unlink(missing_ok=True)
        hidden.unlink(missing_ok=True)
        os.close(fd)


def _live(path: Path) -> Measurement | None:
    """The measurement a registry file holds while its process lives; a file whose lock
    died with its process is removed."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return None
    with f:
        try:
            # Shared, so two readers never mistake each other for a holder.
            fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return Measurement.decode(f.read())
        path.unlink(missing_ok=True)  # stale: nobody can lock this name again
        return None


def others() -> list[Measurement]:
    """The live measurements of other processes, oldest first."""
    try:
        entries = list(os.scandir(registry_dir()))
    except FileNotFoundError:
        return []
    mine = os.getpid()
    found = []
    for entry in entries:
        if entry.name.startswith(".") or not entry.name.endswith(_SUFFIX):
            continue
        measurement = _live(Path(entry.path))
        if measurement is not None and measurement.pid != mine:
            found.append(measurement)
    return sorted(found, key=lambda m: (m.since, m.pid))


class Watch:
    """The other measurements seen while a block runs: at its start, every `interval`
    seconds while it runs (a thread) and at its end."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._seen: dict[tuple[int, float], Measurement] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def seen(self) -> list[Measurement]:
        return sorted(self._seen.values(), key=lambda m: (m.since, m.pid))

    def sample(self) -> list[Measurement]:
        found = others()
        for m in found:
            self._seen.setdefault((m.pid, m.since), m)
        return found

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> Watch:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="effctx-measurement-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()


def loadavg() -> list[float] | None:
    """/proc/loadavg's 1, 5 and 15 minute load averages; None where it cannot be read."""
    try:
        return [float(v) for v in Path("/proc/loadavg").read_text().split()[:3]]
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- a named lock


class Busy(Exception):
    """The lock is held by another process: `holder` names it (None while it has not
    written its name yet)."""

    def __init__(self, holder: Measurement | None) -> None:
        super().__init__(holder.describe() if holder else "another process")
        self.holder = holder


def _holder(fd: int) -> Measurement | None:
    deadline = time.monotonic() + _HOLDER_WAIT_S
    while True:
        holder = Measurement.decode(os.pread(fd, 4096, 0))
        if holder is not None or time.monotonic() > deadline:
            return holder
        time.sleep(0.02)  # it took the lock and is writing its name


@contextmanager
def hold(path: Path, what: str) -> Iterator[Measurement]:
    """Hold an exclusive flock on `path`, with this process's pid and `what` written in
    it, until the block ends; Busy naming the holder when another process holds it.
    A lock whose process was killed is free (flock dies with it) and is taken over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            lock_fd(fd)
        except BlockingIOError:
            raise Busy(_holder(fd)) from None
        me = _now(what)
        os.ftruncate(fd, 0)
        os.pwrite(fd, me.encode(), 0)
        yield me
    finally:
        os.close(fd)  # closing releases the lock; the file stays for the next holder
