"""Recorded traces: read back, damaged or cut off, and exported for Perfetto."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from effctx_core.backends.profile_loader import load_profile
from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine
from effctx_core.events.export import to_perfetto
from effctx_core.events.reader import TraceError, read_trace

EFFCTX = str(Path(sys.executable).with_name("effctx"))


@pytest.fixture(scope="module")
def recorded(default_model, tmp_path_factory) -> tuple[Path, object]:
    path = tmp_path_factory.mktemp("trace") / "session.jsonl"
    engine = SessionEngine(default_model, load_profile("exact").with_changes(n_ctx=1024), trace_path=path)
    engine.open()
    result = engine.complete("The grass is green. " * 40, DecodeConfig(max_tokens=3))
    engine.close()
    return path, result


def test_a_trace_reads_back_as_the_events_that_were_written(recorded):
    path, result = recorded
    trace = read_trace(path)
    kinds = [e.kind for e in trace.events]
    assert kinds[0] == "session_opened" and kinds.count("token") == 3
    finished = next(e for e in trace.events if e.kind == "turn_finished")
    assert finished.result == result
    assert not trace.truncated and trace.note is None


def test_an_older_trace_gives_a_turn_without_a_token_no_ttft(recorded, tmp_path):
    # Before a turn without a token had no TTFT, its ttft_ms was the time to the cancel
    # (or to the end of a turn that decoded nothing).
    path, _ = recorded
    lines = path.read_text().splitlines()
    finished = json.loads(next(line for line in lines if '"turn_finished"' in line))
    recorded_as = [("cancelled", 0, 912.4), ("max_tokens", 0, 35.0), ("eog", 0, 41.0), ("max_tokens", 3, 48.5)]
    older = [json.dumps({**finished, "turn": n, "result": {**finished["result"], "stop_reason": stop,
                                                         "generated": generated, "ttft_ms": ttft_ms}})
             for n, (stop, generated, ttft_ms) in enumerate(recorded_as, start=1)]
    (tmp_path / "old.jsonl").write_text("\n".join([lines[0], *older]) + "\n")
    trace = read_trace(tmp_path / "old.jsonl")
    # an end-of-generation token arrives and is timed, though it is not counted as generated
    assert [e.result.ttft_ms for e in trace.events if e.kind == "turn_finished"] == [None, None, 41.0, 48.5]


def test_a_trace_cut_off_mid_line_reads_up_to_the_cut(recorded, tmp_path):
    path, _ = recorded
    raw = path.read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(raw[: len(raw) - 20])
    trace = read_trace(cut)
    assert trace.truncated
    assert len(trace.events) == raw.count(b"\n") - 1
    assert trace.note.endswith("the last line was cut off (a recording that stopped mid-write); read up to it")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "the trace is empty"),
        (b'{"kind":"token"}\n', "line 1: a token event with missing"),
        (b'{"kind":"session_opened","backend":"llama","model":"m","n_ctx":1,"identity":"x","t_ms":0}\nnot json\n',
         "line 2: not a JSON event (the trace is damaged)"),
        (b'{"kind":"warp_drive","t_ms":0}\n', "line 1: unknown event kind 'warp_drive'"),
        (b'{"kind":"error","error":"E","message":"m","t_ms":0}\n', "not an effctx trace"),
    ],
)
def test_damaged_or_foreign_traces_are_refused_with_the_reason(tmp_path, content, message):
    f = tmp_path / "bad.jsonl"
    f.write_bytes(content)
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_trace(f)


def test_the_perfetto_export_puts_every_step_on_a_timeline(recorded):
    path, result = recorded
    data = to_perfetto(read_trace(path).events)
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    chunks = [e for e in spans if e["name"].startswith("prefill ")]
    tokens = [e for e in spans if e["tid"] == 3]
    assert sum(c["args"]["tokens"] for c in chunks) == result.prefilled
    assert len(tokens) == 3
    assert min(t["ts"] for t in tokens) >= max(c["ts"] + c["dur"] for c in chunks)  # decode after prefill
    assert [c["ts"] for c in chunks] == sorted(c["ts"] for c in chunks)


def test_trace_export_on_the_command_line(recorded, tmp_path):
    path, _ = recorded
    out = tmp_path / "x.json"
    done = subprocess.run([EFFCTX, "trace", "export", str(path), "--perfetto", "-o", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("wrote ")
    assert json.loads(out.read_text())["traceEvents"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("garbage\n")
    refused = subprocess.run([EFFCTX, "trace", "export", str(bad), "--perfetto"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1


def test_a_cancelled_swap_is_an_instant_on_the_engine_track():
    from effctx_core.events.trace import SwapAbandoned

    cancelled = SwapAbandoned(old_profile="exact", new_profile="q8", done=512, total=2503, tokens=2503, ms=812.5,
                              t_ms=1500.0)
    (instant,) = [e for e in to_perfetto([cancelled])["traceEvents"] if e["ph"] == "i"]
    assert (instant["name"], instant["ts"]) == ("swap_cancelled", 1_500_000.0)
    assert instant["args"] == {"old_profile": "exact", "new_profile": "q8", "done": 512, "total": 2503,
                               "tokens": 2503, "ms": 812.5}
