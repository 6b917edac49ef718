"""Temporary files and folders beside their targets, named for the process writing them,
so that what a killed process left behind can be told apart and removed.

A temp is `.NAME.PID-START-TOKEN.tmp` beside the file or folder NAME it will become:
PID is the writer's process id, START its start time in clock ticks since boot (field 22
of /proc/PID/stat; 0 where there is no /proc) and TOKEN a random part that keeps two
temps of one process apart. A temp's writer is alive while a process with that pid
exists and started at START: a pid reused by another process does not keep a dead
writer's temp. Where the start time cannot be read, a live pid keeps its temp.

Folders an earlier effctx left as `.NAME.PID.tmp` (a conversion, the default model's
assembly) are judged by their pid alone.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from pathlib import Path

_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)(?:-(?P<start>\d+)-[0-9a-f]{8})?\.tmp$")


def process_start(pid: int) -> int:
    """The process's start time in clock ticks since boot, or 0 when it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    # the command name (field 2) may hold spaces and parentheses: count after its last ')'
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return 0


_PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT
_OWN_START: tuple[int, int] | None = None


def _own_start() -> int:
    global _OWN_START
    pid = os.getpid()
    if _OWN_START is None or _OWN_START[0] != pid:  # a forked child is another writer
        _OWN_START = (pid, process_start(pid))
    return _OWN_START[1]


def temp_path(target: Path) -> Path:
    """A fresh temp path beside `target`, named for this process."""
    target = Path(target)
    return target.with_name(f".{target.name}.{os.getpid()}-{_own_start()}-{secrets.token_hex(4)}.tmp")


def create_temp_file(target: Path) -> tuple[int, Path]:
    """A new temp file beside `target` (created exclusively, mode 0600): its descriptor and path."""
    while True:
        path = temp_path(target)
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), path
        except FileExistsError:
            continue


def create_temp_dir(target: Path) -> Path:
    """A new, empty temp folder beside `target`."""
    while True:
        path = temp_path(target)
        try:
            path.mkdir(mode=0o700)
            return path
        except FileExistsError:
            continue


def writer_alive(pid: int, start: int) -> bool:
    """Whether the process that named a temp with `pid` and `start` is still running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive
    if start == 0:
        return True  # no start time was recorded: a live pid keeps its temp
    now = process_start(pid)
    return now == 0 or now == start


def sweep_dead_temps(folder: Path, name: str | None = None) -> list[Path]:
    """Remove the temps in `folder` (of the target `name` only, when given) whose writer is
    dead; returns what was removed. A temp that cannot be removed is left for the next sweep."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    removed = []
    for entry in entries:
        found = _TEMP.match(entry.name)
        if found is None or (name is not None and found["name"] != name):
            continue
        pid = int(found["pid"])
        if not 0 < pid <= _PID_MAX:
            continue  # no pid: not a temp of ours
        if writer_alive(pid, int(found["start"] or 0)):
            continue
        path = Path(entry.path)
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            pass  # another sweep got there first
        except OSError:
            continue
        removed.append(path)
    return removed
