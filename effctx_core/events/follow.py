"""Following a trace another effctx process is writing (`effctx --watch FILE`): the events
written so far, then each new one as its line is complete.

The writer flushes one whole line per event, so a line without its newline yet is an
event still being written: it is read on a later poll, never parsed half.
"""

from __future__ import annotations

from pathlib import Path

from effctx_core.events.reader import Trace, TraceError, event_from_line
from effctx_core.events.trace import Event
from effctx_core.user_files import UserFileError, open_input, os_reason

# The most bytes one poll reads: a watcher that joins a long recording catches up over
# several ticks instead of stalling its screen on one read.
POLL_BYTES = 4 * 1024 * 1024


class TraceFollower:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self._file = open_input(self.path, "trace file")
        except UserFileError as exc:
            raise TraceError(str(exc)) from None
        self._partial = b""  # the start of a line whose end is not written yet
        self._lines = 0

    def poll(self) -> list[Event]:
        """The events whose lines were completed since the last poll."""
        try:
            chunk = self._file.read(POLL_BYTES)
        except OSError as exc:
            raise TraceError(f"cannot read trace file {self.path}: {os_reason(exc)}") from None
        if not chunk:
            return []
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        first = self._lines + 1
        self._lines += len(complete)
        return [event_from_line(line, f"{self.path} line {n}") for n, line in enumerate(complete, start=first)]

    def opening(self) -> Trace:
        """The events written so far, which must begin with the session's opening: the
        watch starts from them."""
        events = self.poll()
        if not events:
            raise TraceError(f"{self.path}: no event written yet (the engine has not opened); "
                             "watch it once the model is loaded")
        if events[0].kind != "session_opened":
            raise TraceError(f"{self.path}: not an effctx trace (it must start with a session_opened event)")
        return Trace(self.path, tuple(events), truncated=False)

    def close(self) -> None:
        self._file.close()
