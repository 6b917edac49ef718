"""Temp files and folders of writers that were killed mid-way are removed by the next
writer; a live writer's are kept. Each writer here is a real process, killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from effctx_core.atomic import atomic_write_bytes
from effctx_core.events.trace import TraceWriter
from effctx_core.models import default_model_path, prepare_default_model
from effctx_core.temp_files import process_start

# A writer that makes the temp of the file named on its command line as every effctx
# write does, says where, and waits to be killed.
MAKES_A_TEMP = """
import sys, time
from pathlib import Path
from effctx_core.temp_files import create_temp_file
fd, path = create_temp_file(Path(sys.argv[1]))
print(path, flush=True)
time.sleep(600)
"""

# A run writing over an existing trace: its events go to a temp until it closes.
WRITES_A_TRACE = """
import sys, time
from pathlib import Path
from effctx_core.events.trace import TraceWriter
TraceWriter(Path(sys.argv[1]))
print("writing", flush=True)
time.sleep(600)
"""

# The default model's assembly, stopped after its first block.
ASSEMBLES_THE_MODEL = """
import time
from effctx_core.models import prepare_default_model

def progress(stage, done, total):
    print("assembling", flush=True)
    time.sleep(600)

prepare_default_model(progress)
"""


class Writers:
    """Child processes running a script; killed and reaped at the end of the test."""

    def __init__(self) -> None:
        self.children: list[subprocess.Popen] = []

    def start(self, script: str, *args: str) -> tuple[subprocess.Popen, str]:
        child = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True,
                                 env=os.environ.copy())
        self.children.append(child)
        assert child.stdout is not None
        return child, child.stdout.readline().strip()

    @staticmethod
    def kill(child: subprocess.Popen) -> None:
        child.send_signal(signal.SIGKILL)
        child.wait()  # reaped: no zombie keeps its pid alive

    def close(self) -> None:
        for child in self.children:
            child.kill()
            child.wait()


@pytest.fixture
def writers():
    found = Writers()
    yield found
    found.close()


def temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_write_removes_the_temps_killed_writers_of_that_file_left(writers, tmp_path):
    target, other = tmp_path / "settings.toml", tmp_path / "other.json"
    killed, left = writers.start(MAKES_A_TEMP, str(target))
    killed_other, other_left = writers.start(MAKES_A_TEMP, str(other))
    writers.kill(killed)
    writers.kill(killed_other)
    assert temps(tmp_path) == sorted([Path(left).name, Path(other_left).name])
    atomic_write_bytes(target, b"theme = 'dark'\n")
    assert target.read_bytes() == b"theme = 'dark'\n"
    assert temps(tmp_path) == [Path(other_left).name]  # another file's temps wait for its own next write


def test_a_write_keeps_the_temp_of_a_live_writer(writers, tmp_path):
    target = tmp_path / "index.json"
    _, live = writers.start(MAKES_A_TEMP, str(target))
    atomic_write_bytes(target, b"{}")
    assert temps(tmp_path) == [Path(live).name]


def test_a_temp_named_by_a_pid_that_another_process_now_has_is_removed(tmp_path):
    # this process's pid, with another start time: the writer that had the pid is gone
    target = tmp_path / "refs.json"
    stale = tmp_path / f".refs.json.{os.getpid()}-{process_start(os.getpid()) + 1}-0123abcd.tmp"
    stale.write_bytes(b"half")
    atomic_write_bytes(target, b"{}")
    assert temps(tmp_path) == []


def test_a_trace_run_killed_before_its_close_leaves_a_temp_the_next_run_removes(writers, tmp_path):
    trace = tmp_path / "run.jsonl"
    TraceWriter(trace).close()  # an existing trace: the next runs write beside it
    killed, _ = writers.start(WRITES_A_TRACE, str(trace))
    writers.kill(killed)
    assert len(temps(tmp_path)) == 1
    TraceWriter(trace).close()
    assert temps(tmp_path) == []


def test_a_killed_assembly_of_the_default_model_leaves_a_temp_the_next_one_removes(writers, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    killed, said = writers.start(ASSEMBLES_THE_MODEL)
    assert said == "assembling"
    writers.kill(killed)
    folder = default_model_path().parent
    assert len(temps(folder)) == 1
    assert prepare_default_model() == default_model_path()
    assert temps(folder) == []
