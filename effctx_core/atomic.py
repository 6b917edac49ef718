"""Crash-safe file writes: temp file in the same directory, fsync, rename, fsync dir.

The temp is named for the writing process (temp_files.py): a write first removes what
writers of the same file that were killed mid-way left behind."""

from __future__ import annotations

import os
from pathlib import Path

from effctx_core.temp_files import create_temp_file, sweep_dead_temps


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_dead_temps(path.parent, path.name)
    fd, tmp = create_temp_file(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
