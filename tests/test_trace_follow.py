"""Following a trace while another process writes it: whole lines only, in order, and a
clear error for a file that is not (or stops being) a trace."""

from __future__ import annotations

from pathlib import Path

import pytest

import effctx_tui
from effctx_core.events.follow import TraceFollower
from effctx_core.events.reader import TraceError, read_trace

DEMO = Path(effctx_tui.__file__).with_name("demos") / "chat.jsonl"
LINES = DEMO.read_bytes().splitlines(keepends=True)


def test_the_opening_holds_the_events_written_so_far(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(b"".join(LINES[:3]))
    assert TraceFollower(trace).opening().events == read_trace(DEMO).events[:3]


def test_a_line_still_being_written_is_read_once_it_is_complete(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(LINES[0] + LINES[1][:20])
    follower = TraceFollower(trace)
    follower.opening()
    assert follower.poll() == []
    with trace.open("ab") as f:
        f.write(LINES[1][20:] + LINES[2])
    assert follower.poll() == list(read_trace(DEMO).events[1:3])


def test_every_event_of_a_trace_written_in_pieces_is_read_once_in_order(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(LINES[0])
    follower = TraceFollower(trace)
    events = list(follower.opening().events)
    rest = b"".join(LINES[1:])
    for start in range(0, len(rest), 97):  # pieces that cut lines anywhere
        with trace.open("ab") as f:
            f.write(rest[start:start + 97])
        events += follower.poll()
    assert tuple(events) == read_trace(DEMO).events


def test_a_file_with_no_event_yet_is_refused_with_the_reason(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(b"")
    with pytest.raises(TraceError, match=r"no event written yet \(the engine has not opened\)"):
        TraceFollower(trace).opening()


def test_a_file_that_is_not_a_trace_is_refused(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(LINES[1])
    with pytest.raises(TraceError, match="not an effctx trace"):
        TraceFollower(trace).opening()


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(TraceError, match="trace file not found"):
        TraceFollower(tmp_path / "none.jsonl")


def test_a_damaged_line_written_later_names_its_line(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(LINES[0])
    follower = TraceFollower(trace)
    follower.opening()
    with trace.open("ab") as f:
        f.write(b"{oops\n")
    with pytest.raises(TraceError, match=r"t.jsonl line 2: not a JSON event \(the trace is damaged\)"):
        follower.poll()
