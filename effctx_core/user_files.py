"""Files and directories the user names (or that effctx keeps for the user), opened so
that bad input becomes one line instead of a hang, a traceback or lost data.

- Inputs are opened non-blocking and checked with fstat before a byte is read: a FIFO
  would block `open()` until a writer appears (forever, for a console that waits), and a
  directory or a device is never a file a user meant to give.
- Outputs are checked before any work starts: an existing directory, a FIFO or a path
  through a file is refused up front, not after a model load.
- A file effctx cannot read is never overwritten: it is moved to a `quarantine/` folder
  beside it, and the message says where.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path
from typing import BinaryIO, Iterable

from effctx_core.errors import EffctxError
from effctx_core.units import format_bytes

# Output targets that are not regular files but are fine to write to (/dev/null, a tty).
_WRITABLE_DEVICES = (stat.S_ISCHR,)


class UserFileError(EffctxError):
    """A file or directory the user named that cannot be used as asked."""


def os_reason(exc: OSError) -> str:
    """The OS's one-line reason, with the errno names a user can look up."""
    if exc.errno == errno.ENOTDIR:
        return "a part of the path is a file, not a directory"
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    return exc.strerror or str(exc)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_input(path: str | os.PathLike, what: str) -> BinaryIO:
    """A regular file opened for reading, or a one-line UserFileError."""
    path = Path(path).expanduser()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UserFileError(f"{what} not found: {path}") from None
    except OSError as exc:
        raise UserFileError(f"cannot read {what} {path}: {os_reason(exc)}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UserFileError(f"{what} is {_kind(mode)}, not a file: {path}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_input_bytes(path: str | os.PathLike, what: str, limit: int | None = None) -> bytes:
    """`limit`: the most bytes the file may hold, checked before any is read."""
    with open_input(path, what) as f:
        size = os.fstat(f.fileno()).st_size
        if limit is not None and size > limit:
            raise UserFileError(f"{what} is larger than {format_bytes(limit)} ({size:,} bytes): {path}")
        try:
            return f.read()
        except OSError as exc:
            raise UserFileError(f"cannot read {what} {path}: {os_reason(exc)}") from None


def read_input_text(path: str | os.PathLike, what: str, limit: int | None = None) -> str:
    data = read_input_bytes(path, what, limit)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserFileError(f"{what} is not UTF-8 text: {path}") from None
    # UTF-8 lets NUL through, but no text a person writes holds one: it is binary data
    if "\0" in text:
        raise UserFileError(f"{what} is binary (it holds NUL bytes), not text: {path}")
    return text


def check_output_file(path: str | os.PathLike, what: str) -> Path:
    """Refuse an output path that cannot become a file: an existing directory, FIFO or
    socket, or a parent that is missing or is a file. A character device (/dev/null)
    is accepted. Returns the path; the caller decides what an existing file may be."""
    path = Path(path).expanduser()
    try:
        st = path.stat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UserFileError(f"cannot write {what} {path}: {os_reason(exc)}") from None
    if st is not None:
        if stat.S_ISREG(st.st_mode) or any(test(st.st_mode) for test in _WRITABLE_DEVICES):
            return path
        raise UserFileError(f"cannot write {what} {path}: it is {_kind(st.st_mode)}")
    parent = path.parent
    if not parent.exists():
        raise UserFileError(f"cannot write {what} {path}: the folder {parent} does not exist")
    if not parent.is_dir():
        raise UserFileError(f"cannot write {what} {path}: {parent} is a file, not a folder")
    return path


def refuse_same_file(output: str | os.PathLike, what: str,
                     inputs: Iterable[tuple[str | os.PathLike | None, str]]) -> None:
    """Refuse an output that is one of the command's inputs: the same file by device and
    inode, so the same path, a symlink to it and a hard link are all caught. Writing it
    would destroy what is being read (a trace exported over itself cannot be replayed)."""
    try:
        out = os.stat(Path(output).expanduser())
    except OSError:
        return  # a file that does not exist yet is nobody's input
    if not stat.S_ISREG(out.st_mode):
        return  # /dev/null and other devices are read and written by everyone
    for path, input_what in inputs:
        if path is None:
            continue
        try:
            st = os.stat(Path(path).expanduser())
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (out.st_dev, out.st_ino):
            raise UserFileError(f"the {what} {output} is the {input_what} {path}: writing it would destroy it "
                                f"(name another {what})")


def file_in_the_way(folder: str | os.PathLike) -> Path | None:
    """The file that stands where `folder` or one of its parents must be a folder, if
    any: such a folder can be neither read nor made, and must not read as empty."""
    for path in (Path(folder), *Path(folder).parents):
        if path.exists():
            return None if path.is_dir() else path
    return None


def folder_problem(folder: str | os.PathLike, what: str) -> str | None:
    """One line saying why `folder` cannot be used as `what`, or None."""
    blocker = file_in_the_way(folder)
    if blocker is None:
        return None
    if blocker == Path(folder):
        return f"{what} {folder} is a file, not a folder"
    return f"{what} {folder} cannot be used: {blocker} is a file, not a folder"


def ensure_dir(path: str | os.PathLike, what: str) -> Path:
    """A directory, made with its parents if needed, or a one-line UserFileError."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserFileError(f"cannot use {what} {path}: a file is in the way") from None
    except OSError as exc:
        raise UserFileError(f"cannot create {what} {path}: {os_reason(exc)}") from None
    return path


def quarantine_file(path: Path) -> Path:
    """Move a file that failed to read aside (into `quarantine/` beside it, with the
    time in its name) so that nothing ever writes over it; returns where it went."""
    folder = ensure_dir(path.parent / "quarantine", "the quarantine folder")
    target = folder / f"{path.name}.{time.strftime('%Y%m%d-%H%M%S')}"
    n = 1
    while target.exists():
        n += 1
        target = folder / f"{path.name}.{time.strftime('%Y%m%d-%H%M%S')}.{n}"
    try:
        os.rename(path, target)
    except OSError as exc:
        raise UserFileError(f"cannot move {path} aside to {target}: {os_reason(exc)}") from None
    return target
