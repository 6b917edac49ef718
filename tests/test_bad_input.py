"""Hostile input and faults against the CLI: each ends as one line on stderr and exit 2
(130 for Ctrl+C), with nothing stored lost and no hang."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from effctx_core.snapshots.tree_file import save_tree, write_tree_file
from tests.helpers.cli import effctx, interruptible, one_error_line
from tests.helpers.small_workload import SMALL_WORKLOAD


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.fixture
def data_home_is_a_file(tmp_path) -> dict:
    blocker = tmp_path / "data-home"
    blocker.write_text("a file where the data folder should be")
    return {"XDG_DATA_HOME": str(blocker), "XDG_CACHE_HOME": str(tmp_path / "cache")}


# --------------------------------------------------------------------------- FIFOs never hang

FIFO_ARGS = {
    "--model": ["run", "--model", "{fifo}", "--prompt", "hi"],
    "--prompt-file": ["run", "--prompt-file", "{fifo}"],
    "--prefix-file": ["run", "--prefix-file", "{fifo}", "--prompt", "hi"],
    "--replay": ["--replay", "{fifo}"],
    "trace export": ["trace", "export", "{fifo}", "--perfetto"],
    "sessions import": ["sessions", "import", "{fifo}", "--name", "imported"],
}


@pytest.mark.parametrize("case", list(FIFO_ARGS))
def test_a_fifo_given_as_a_file_is_refused_at_once(case, fifo, tmp_path):
    args = [a.format(fifo=fifo) for a in FIFO_ARGS[case]]
    line = one_error_line(effctx(*args, env={"XDG_DATA_HOME": str(tmp_path / "data")}, timeout=30))
    assert f"is a FIFO (named pipe), not a file: {fifo}" in line


# --------------------------------------------------------------------------- traces


def test_trace_refuses_an_existing_file_that_is_not_a_trace(tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("my notes\n")
    line = one_error_line(effctx("run", "--prompt", "hi", "--trace", str(prompt)))
    assert line == f"effctx: error: {prompt} exists and is not an effctx trace: refusing to write over it"
    assert prompt.read_text() == "my notes\n"


@pytest.mark.parametrize("where", ["directory", "under a file", "missing folder"])
def test_trace_to_a_path_that_cannot_be_a_file_is_refused_before_the_model_loads(where, tmp_path):
    (tmp_path / "afile").write_text("x")
    target = {"directory": tmp_path, "under a file": tmp_path / "afile" / "t.jsonl",
              "missing folder": tmp_path / "nope" / "t.jsonl"}[where]
    line = one_error_line(effctx("run", "--prompt", "hi", "--model", str(tmp_path / "absent.gguf"),
                                 "--trace", str(target)))
    # the trace is checked before the model: the missing model is not what is reported
    assert line.startswith(f"effctx: error: cannot write trace file {target}")


def test_a_full_disk_under_the_trace_still_prints_the_result(default_model):
    out = effctx("run", "--prompt", "Once upon a time", "--max-tokens", "2", "--json", "--trace", "/dev/full")
    assert out.returncode == 2
    assert json.loads(out.stdout)["tokens"]["generated"] == 2
    assert out.stderr.strip().splitlines() == ["effctx: error: trace file /dev/full not written: no space left on the device"]


def test_a_second_run_replaces_an_existing_trace_whole(default_model, tmp_path):
    trace = tmp_path / "run.jsonl"
    for _ in range(2):
        assert effctx("run", "--prompt", "hi", "--max-tokens", "1", "--trace", str(trace)).returncode == 0
    kinds = [json.loads(line)["kind"] for line in trace.read_text().splitlines()]
    assert kinds.count("session_opened") == 1
    assert list(tmp_path.iterdir()) == [trace]  # no temp file left beside it


def test_console_refuses_a_trace_directory_before_it_opens(tmp_path):
    line = one_error_line(effctx("--trace", str(tmp_path)))
    assert line == f"effctx: error: cannot write trace file {tmp_path}: it is a directory"


# --------------------------------------------------------------------------- an output is never an input


@pytest.fixture
def recording(tmp_path) -> Path:
    """A real recorded trace (the shipped chat demo), copied where a test may lose it."""
    from importlib import resources

    path = tmp_path / "rec.jsonl"
    path.write_bytes((resources.files("effctx_tui") / "demos" / "chat.jsonl").read_bytes())
    return path


@pytest.mark.parametrize("how", ["the same path", "a symlink", "a hard link"])
def test_trace_export_refuses_to_write_over_the_trace_it_exports(how, recording, tmp_path):
    from effctx_core.events.reader import read_trace

    before = recording.read_bytes()
    out = {"the same path": recording, "a symlink": tmp_path / "link.json", "a hard link": tmp_path / "hard.json"}[how]
    if how == "a symlink":
        out.symlink_to(recording)
    elif how == "a hard link":
        os.link(recording, out)
    line = one_error_line(effctx("trace", "export", str(recording), "--perfetto", "-o", str(out)))
    assert line == (f"effctx: error: the output file {out} is the trace being exported {recording}: "
                    "writing it would destroy it (name another output file)")
    assert recording.read_bytes() == before
    assert read_trace(recording).events  # still a trace that replays


def test_trace_export_refuses_to_write_over_another_recording(recording, tmp_path):
    other = tmp_path / "other.jsonl"
    other.write_bytes(recording.read_bytes())
    line = one_error_line(effctx("trace", "export", str(recording), "--perfetto", "-o", str(other)))
    assert line == (f"effctx: error: the output file {other} is an effctx trace recording: refusing to write over it "
                    "(name another output file)")
    assert other.read_bytes() == recording.read_bytes()


def test_run_refuses_a_trace_file_that_is_its_prompt_file(recording):
    before = recording.read_bytes()
    line = one_error_line(effctx("run", "--prompt-file", str(recording), "--trace", str(recording)))
    assert line == (f"effctx: error: the trace file {recording} is the prompt file {recording}: "
                    "writing it would destroy it (name another trace file)")
    assert recording.read_bytes() == before


def test_sessions_export_refuses_to_write_over_a_file_that_is_not_a_session(tmp_path):
    from effctx_core.snapshots.tree import SnapshotTree

    tree = SnapshotTree()
    tree.add(None, (), "root", "ab" * 32, label="start")
    save_tree(tree, "talk", tmp_path / "data" / "effctx" / "sessions")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    line = one_error_line(effctx("sessions", "export", "talk", str(notes), env={"XDG_DATA_HOME": str(tmp_path / "data")}))
    assert line == f"effctx: error: {notes} exists and is not an effctx session file: refusing to write over it"
    assert notes.read_text() == "my notes\n"


# --------------------------------------------------------------------------- empty values and names


@pytest.mark.parametrize("args", [["--session", ""], ["serve", "--demo", "chat", "--session", ""],
                                  ["sessions", "show", ""], ["sessions", "rm", ""]])
def test_an_empty_session_name_is_refused_by_every_way_in(args):
    line = one_error_line(effctx(*args, timeout=30))
    assert "invalid session name '': use 1-64 letters" in line


@pytest.mark.parametrize("args", [["--model", ""], ["run", "--prompt", "hi", "--prefix-file", ""],
                                  ["--replay", ""], ["serve", "--host", ""], ["trace", "export", "", "--perfetto"]])
def test_an_empty_value_never_falls_back_to_the_default(args):
    line = one_error_line(effctx(*args, timeout=30))
    assert line.endswith("an empty value (give one, or leave the option out)")


# --------------------------------------------------------------------------- a cache folder that is a file


@pytest.fixture
def cache_is_a_file(tmp_path) -> dict:
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "effctx").write_text("a file where effctx's cache folder should be")
    return {"XDG_CACHE_HOME": str(tmp_path / "cache")}


@pytest.mark.parametrize("command", ["ls", "verify", "gc"])
def test_snapshots_under_a_cache_folder_that_is_a_file_is_an_error(command, cache_is_a_file):
    cache = Path(cache_is_a_file["XDG_CACHE_HOME"])
    line = one_error_line(effctx("snapshots", command, env=cache_is_a_file))
    assert line == (f"effctx: error: the snapshot store {cache / 'effctx' / 'snapshots'} cannot be used: "
                    f"{cache / 'effctx'} is a file, not a folder")


def test_sessions_under_a_data_folder_that_is_a_file_is_an_error(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "effctx").write_text("a file")
    line = one_error_line(effctx("sessions", "ls", env={"XDG_DATA_HOME": str(tmp_path / "data")}))
    assert line == (f"effctx: error: the sessions folder {tmp_path / 'data' / 'effctx' / 'sessions'} cannot be used: "
                    f"{tmp_path / 'data' / 'effctx'} is a file, not a folder")


def test_run_under_a_cache_folder_that_is_a_file_warns_and_runs(default_model, cache_is_a_file):
    cache = Path(cache_is_a_file["XDG_CACHE_HOME"])
    out = effctx("run", "--prompt", "hi", "--max-tokens", "1", "--json", env=cache_is_a_file)
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines()[0] == (
        f"effctx: warning: the cache folder {cache / 'effctx'} is a file, not a folder: nothing is cached "
        "(the model is hashed again on every run, and no snapshot or prefix-cache state is kept)")
    assert json.loads(out.stdout)["tokens"]["generated"] == 1


# --------------------------------------------------------------------------- Ctrl+C


def test_ctrl_c_during_model_load_exits_130(default_model):
    proc = interruptible("run", "--prompt", "hi", "--max-tokens", "1", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # llama.cpp maps the model file early in its load, which goes on for most of a second
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + 60
    while default_model.name not in maps.read_text() and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    stderr = proc.stderr.read()
    assert stderr.strip().splitlines() == ["effctx: interrupted"], stderr
    assert proc.stdout.read() == ""


# --------------------------------------------------------------------------- the data folder


@pytest.mark.parametrize("args", [["run", "--prompt", "hi"], ["model", "prepare"]])
def test_a_data_home_that_is_a_file_is_one_line(args, data_home_is_a_file):
    line = one_error_line(effctx(*args, env=data_home_is_a_file))
    assert "cannot create the effctx data folder" in line and "a part of the path is a file" in line


def test_sessions_import_into_a_data_home_that_is_a_file_is_one_line(data_home_is_a_file, tmp_path):
    from effctx_core.snapshots.tree import SnapshotTree

    tree = SnapshotTree()
    tree.add(None, (), "root", "ab" * 32, label="start")
    exported = tmp_path / "tree.json"
    write_tree_file(tree, exported)
    line = one_error_line(effctx("sessions", "import", str(exported), "--name", "x", env=data_home_is_a_file))
    blocker = data_home_is_a_file["XDG_DATA_HOME"]
    assert line == f"effctx: error: the sessions folder {blocker}/effctx/sessions cannot be used: {blocker} is a file, not a folder"


# --------------------------------------------------------------------------- serve


def test_serve_on_a_port_in_use_is_one_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = one_error_line(effctx("serve", "--demo", "chat", "--port", str(port)))
    assert line == f"effctx: error: cannot listen on 127.0.0.1:{port}: the port is in use"


def test_serve_on_a_host_that_does_not_resolve_is_one_line():
    line = one_error_line(effctx("serve", "--demo", "chat", "--host", "no-such-host.invalid"))
    assert line.startswith("effctx: error: --host no-such-host.invalid: the name does not resolve")


SERVE_CONSOLE_OPTIONS = {
    "--model": (["--model", "{tmp}/absent.gguf"], "model file not found"),
    "--replay": (["--replay", "{tmp}/absent.jsonl"], "trace file not found"),
    "--demo": (["--demo", "nope"], "unknown demo 'nope'"),
    "--speed": (["--demo", "chat", "--speed", "0"], "argument --speed: 0 is out of range"),
    "--max-tokens": (["--max-tokens", "-5"], "argument --max-tokens: -5 is out of range"),
}


@pytest.mark.parametrize("case", list(SERVE_CONSOLE_OPTIONS))
def test_serve_checks_the_console_options_before_it_starts(case, tmp_path):
    args, message = SERVE_CONSOLE_OPTIONS[case]
    line = one_error_line(effctx("serve", *[a.format(tmp=tmp_path) for a in args], timeout=30))
    assert message in line


# --------------------------------------------------------------------------- numbers

BAD_NUMBERS = {
    "temperature nan": (["run", "--prompt", "hi", "--temperature", "nan"], "argument --temperature: nan is out of range"),
    "temperature inf": (["run", "--prompt", "hi", "--temperature", "inf"], "argument --temperature: inf is out of range"),
    "temperature negative": (["run", "--prompt", "hi", "--temperature", "-1"], "argument --temperature: -1 is out of range: it must be at least 0"),
    "top-p zero": (["run", "--prompt", "hi", "--top-p", "0"], "argument --top-p: 0 is out of range: it must be above 0 and at most 1"),
    "top-p above one": (["run", "--prompt", "hi", "--top-p", "1.5"], "argument --top-p: 1.5 is out of range"),
    "prompt tokens negative": (["bench", "overhead", "--prompt-tokens", "-1"], "argument --prompt-tokens: -1 is out of range: it must be at least 1"),
    "rounds zero": (["bench", "overhead", "--rounds", "0"], "argument --rounds: 0 is out of range"),
    "decode tokens zero": (["bench", "overhead", "--decode-tokens", "0"], "argument --decode-tokens: 0 is out of range"),
    "console max tokens negative": (["--max-tokens", "-5"], "argument --max-tokens: -5 is out of range: it must be at least 1"),
    "not a number": (["run", "--prompt", "hi", "--max-tokens", "many"], "argument --max-tokens: 'many' is not a whole number"),
    "empty session name": (["sessions", "import", "{tmp}/x.json", "--name", ""], "invalid session name ''"),
}


@pytest.mark.parametrize("case", list(BAD_NUMBERS))
def test_an_out_of_range_value_is_one_line(case, tmp_path):
    args, message = BAD_NUMBERS[case]
    line = one_error_line(effctx(*[a.format(tmp=tmp_path) for a in args], timeout=30))
    assert message in line


def test_more_threads_than_cores_is_warned_about_and_the_run_goes_on(default_model):
    cores = len(os.sched_getaffinity(0))
    out = effctx("run", "--prompt", "hi", "--max-tokens", "1", "--threads", str(cores * 4), "--json")
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines()[0].startswith(f"effctx: warning: {cores * 4} threads on {cores} free core")


# --------------------------------------------------------------------------- stores it cannot use


@pytest.mark.parametrize("command", ["ls", "verify", "gc"])
def test_snapshots_on_a_store_folder_that_does_not_exist_is_an_error(command, tmp_path):
    line = one_error_line(effctx("snapshots", command, "--dir", str(tmp_path / "absent")))
    assert line == f"effctx: error: no snapshot store at {tmp_path / 'absent'} (the folder does not exist)"


@pytest.mark.parametrize("command", ["ls", "verify", "gc"])
def test_snapshots_on_a_cache_folder_that_is_a_file_is_an_error(command, tmp_path):
    cache = tmp_path / "cache"
    (cache / "effctx").mkdir(parents=True)
    (cache / "effctx" / "snapshots").write_text("not a store")
    line = one_error_line(effctx("snapshots", command, env={"XDG_CACHE_HOME": str(cache)}))
    assert line == f"effctx: error: the snapshot store {cache / 'effctx' / 'snapshots'} is a file, not a folder"


# --------------------------------------------------------------------------- session files


def _exported_tree(tmp_path: Path, **node_fields) -> Path:
    from effctx_core.snapshots.tree import SnapshotTree

    tree = SnapshotTree()
    tree.add(None, (), "root", "ab" * 32, label="start")
    path = tmp_path / "tree.json"
    write_tree_file(tree, path)
    doc = json.loads(path.read_text())
    doc["nodes"][0].update(node_fields)
    path.write_text(json.dumps(doc))
    return path


def test_sessions_import_refuses_a_blob_key_that_is_a_path(tmp_path):
    path = _exported_tree(tmp_path, blob="../../etc/passwd")
    line = one_error_line(effctx("sessions", "import", str(path), env={"XDG_DATA_HOME": str(tmp_path / "d")}))
    assert "node 0 has a blob key that is not a snapshot key ('../../etc/passwd')" in line


def test_sessions_import_refuses_a_residency_of_the_wrong_shape(tmp_path):
    residency = {"policy": "none", "source": "observed", "n_tokens": "many", "sink_tokens": 0, "recent_tokens": 0,
                 "hot_tokens": 0, "cold_tokens": 0, "evicted_tokens": 0, "resident_tokens": 0, "budget": None,
                 "over_budget": False, "evicted_ranges": [], "cold_ranges": []}
    path = _exported_tree(tmp_path, residency=residency)
    line = one_error_line(effctx("sessions", "import", str(path), env={"XDG_DATA_HOME": str(tmp_path / "d")}))
    assert line.endswith("corrupt session file: node 0 residency 'n_tokens' has the wrong type")


def test_a_damaged_session_is_moved_aside_and_never_written_over(tmp_path):
    from effctx_core.snapshots.tree import SnapshotTree
    from effctx_core.snapshots.tree_file import load_tree

    damaged = tmp_path / "talk.json"
    damaged.write_text('{"format": "effctx-session", "version": 1, "nodes": [tru')
    with pytest.raises(Exception) as caught:
        load_tree("talk", tmp_path)
    moved = sorted((tmp_path / "quarantine").iterdir())
    assert len(moved) == 1 and moved[0].read_text() == '{"format": "effctx-session", "version": 1, "nodes": [tru'
    assert str(caught.value).endswith(f"the file was moved to {moved[0]}")
    tree = SnapshotTree()
    tree.add(None, (), "root", "ab" * 32, label="start")
    save_tree(tree, "talk", tmp_path)  # the next save writes a new file; the damaged one is kept
    assert moved[0].exists() and len(load_tree("talk", tmp_path)) == 1


def test_a_streaming_profile_with_only_the_policy_is_valid(tmp_path):
    from effctx_core.backends.profile_loader import load_profile

    path = tmp_path / "s.toml"
    path.write_text('[residency]\npolicy = "streaming"\n')
    residency = load_profile(str(path)).residency
    assert (residency.sink_tokens, residency.recent_tokens, residency.block_size) == (32, 992, 32)


def test_a_damaged_settings_file_is_moved_aside_before_a_setting_is_written(tmp_path, monkeypatch):
    from effctx_tui import settings

    path = tmp_path / "settings.toml"
    path.write_text('theme = "effctx-light"\nother = [unclosed\n')
    monkeypatch.setattr(settings, "settings_path", lambda: path)
    values, warning = settings.read_settings()
    moved = next((tmp_path / "quarantine").iterdir())
    assert values == {} and warning.endswith(f"moved to {moved}")
    assert moved.read_text() == 'theme = "effctx-light"\nother = [unclosed\n'
    settings.write_setting("theme", "effctx-dark")
    assert path.read_text() == 'theme = "effctx-dark"\n'


def test_a_reply_cut_by_a_full_context_says_so(default_model):
    out = effctx("run", "--prompt", "Count: 1, 2, 3,", "--n-ctx", "256", "--max-tokens", "1000", "--json")
    data = json.loads(out.stdout)
    assert data["stop_reason"] == "n_ctx"
    assert data["tokens"]["prefilled"] + data["tokens"]["generated"] == data["tokens"]["n_ctx"]


# --------------------------------------------------------------------------- --profile auto's workload



def test_profile_auto_checks_the_workload_name_first_with_bench_runs_message():
    line = one_error_line(effctx("run", "--prompt", "hi", "--profile", "auto", "--workload", "nosuch"))
    assert line.startswith("effctx: error: unknown workload 'nosuch' (built in: agent-loop, ")


def test_profile_auto_checks_a_workload_file_first_with_bench_runs_message(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('colour = "blue"\n' + SMALL_WORKLOAD)
    line = one_error_line(effctx("run", "--prompt", "hi", "--profile", "auto", "--workload", str(path)))
    assert line == f"effctx: error: workload {path}: unknown field 'colour'"
