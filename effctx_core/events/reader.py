"""Reading a JSON Lines trace back into typed events.

A trace cut off in its last line (a crashed recording) is read up to the cut and says so;
any other damage, or a file that is not an effctx trace, is an error naming the line.
"""

from __future__ import annotations

import json
import re
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

from effctx_core.contract import PrefixCause, RuntimeCounts
from effctx_core.errors import EffctxError
from effctx_core.events.trace import Event, PrefixChecked, RequestServed, RuntimeCounted, TurnFinished, TurnResult
from effctx_core.user_files import UserFileError, read_input_bytes

EVENT_TYPES: dict[str, type[Event]] = {cls.kind: cls for cls in Event.__subclasses__()}


class TraceError(EffctxError):
    pass


@dataclass(frozen=True)
class Trace:
    path: Path
    events: tuple[Event, ...]
    truncated: bool  # the last line was cut off mid-write and was left out

    @property
    def note(self) -> str | None:
        if self.truncated:
            return f"{self.path}: the last line was cut off (a recording that stopped mid-write); read up to it"
        return None


# Traces written before prefix checks carried a structured cause (effctx 0.1 before
# the cell contract) state it only in the sentence; these are its exact forms.
_LEGACY_CAUSES = (
    (re.compile(r"empty cache"), PrefixCause.EMPTY),
    (re.compile(r"identical to the resident tape"), PrefixCause.IDENTICAL),
    (re.compile(r"extends the resident tape"), PrefixCause.EXTENDS),
    (re.compile(r"diverges from the resident tape at token (?P<at>\d+)"), PrefixCause.DIVERGED),
    (re.compile(r"sliding-window rollback limit: the cache can be cut back to (?P<floor>\d+) tokens "
                r"at the earliest, the prefix diverges at (?P<at>\d+)"), PrefixCause.ROLLBACK_LIMIT),
)


def legacy_prefix_cause(data: dict) -> dict:
    """The structured cause of a prefix check recorded as a sentence only."""
    for pattern, cause in _LEGACY_CAUSES:
        found = pattern.match(str(data.get("reason", "")))
        if found:
            numbers = {k: int(v) for k, v in found.groupdict().items()}
            return {"cause": cause.value, "diverged_at": numbers.get("at"), "rollback_floor": numbers.get("floor")}
    return {}


def legacy_ttft(result: dict) -> dict:
    """A turn result as recorded before a turn without a token had no TTFT: its ttft_ms was
    then the time to the cancel (or to the end of a turn that decoded nothing). A turn that
    generated nothing and did not end on an end-of-generation token (which arrives, and is
    timed, without being counted) had no token; traces written since record it as null."""
    if not result.get("generated") and result.get("stop_reason") != "eog":
        return {**result, "ttft_ms": None}
    return result


def _event(data: dict, where: str) -> Event:
    kind = data.pop("kind", None)
    cls = EVENT_TYPES.get(kind)
    if cls is None:
        raise TraceError(f"{where}: unknown event kind {kind!r}")
    names = {f.name for f in fields(cls)}
    # Fields with a default were added later: a trace without them still reads.
    required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
    missing, extra = sorted(required - set(data)), sorted(set(data) - names)
    if missing or extra:
        raise TraceError(f"{where}: a {kind} event with missing {missing} / unknown {extra} fields")
    if cls is TurnFinished:
        data["result"] = TurnResult(**legacy_ttft(data["result"]))
    if cls is RuntimeCounted:
        data["counts"] = RuntimeCounts(**data["counts"])
    if cls is RequestServed:
        data["segments"] = tuple(tuple(segment) for segment in data.get("segments", ()))
    if cls is PrefixChecked and not data.get("cause"):
        data.update(legacy_prefix_cause(data))
    try:
        return cls(**data)
    except TypeError as exc:
        raise TraceError(f"{where}: a {kind} event that does not fit its record: {exc}") from None


def event_from_line(line: bytes, where: str) -> Event:
    """One complete line of a trace as its typed event; a damaged line is a TraceError."""
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise TraceError(f"{where}: not a JSON event (the trace is damaged)") from None
    if not isinstance(data, dict):
        raise TraceError(f"{where}: not a JSON event object")
    return _event(data, where)


def read_trace(path: str | Path) -> Trace:
    path = Path(path)
    try:
        raw = read_input_bytes(path, "trace file")
    except UserFileError as exc:
        raise TraceError(str(exc)) from None
    if not raw.strip():
        raise TraceError(f"{path}: the trace is empty")
    lines = raw.split(b"\n")
    # A complete trace ends with a newline; without one, the last line is a cut write.
    cut = lines[-1] != b""
    body = lines[:-1]
    tail = lines[-1] if cut else None
    events = [event_from_line(line, f"{path} line {number}") for number, line in enumerate(body, start=1)]
    truncated = False
    if tail is not None:
        try:
            events.append(_event(json.loads(tail), f"{path} line {len(body) + 1}"))
        except (ValueError, UnicodeDecodeError):
            truncated = True
    if not events or events[0].kind != "session_opened":
        raise TraceError(f"{path}: not an effctx trace (it must start with a session_opened event)")
    return Trace(path, tuple(events), truncated)
