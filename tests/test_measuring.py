"""Measurements that would measure each other: the registry in which every effctx
measurement is seen while its process lives, one certification of a cell at a time, and
timed stages that another measurement overlapped, which certify does not keep. Every
other process here is a real one, running effctx's own code, killed with SIGKILL."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from effctx_core.backends.profile_loader import load_profile
from effctx_core.backends.registry import get_backend
from effctx_core.bench.measuring import Watch, others, registry_dir
from effctx_core.certify.hardware import this_machine
from effctx_core.certify.plan import CertifyPlan
from effctx_core.certify.runner import Certifier, MeasurementOverlap, cell_key
from effctx_core.certify.store import CertificateStore
from tests.helpers.small_workload import write_small_workload
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

EFFCTX = str(Path(sys.executable).with_name("effctx"))

# A process that measures until it is killed; it prints its record once registered.
MEASURING = """
import json, sys, time
from effctx_core.bench.measuring import measuring
with measuring(sys.argv[1]) as me:
    print(json.dumps({"pid": me.pid, "since": me.since}), flush=True)
    time.sleep(600)
"""

# The exact profile with room for the agent loop in the tiny model's tokens; the model is trained for as many.
N_CTX = 16384
CERTIFY_QUICK = ("certify", "--quick", "--profile", "exact", "--n-ctx", str(N_CTX))

# A process that holds the certification lock of that cell of a model until it is killed.
HOLDING = """
import json, sys, time
from pathlib import Path
from effctx_core.certify.plan import QUICK
from effctx_core.certify.runner import Certifier
from effctx_core.certify.store import CertificateStore
from effctx_core.backends.profile_loader import load_profile
profile = load_profile("exact").with_changes(n_ctx=int(sys.argv[3]))
with Certifier(Path(sys.argv[1]), CertificateStore(), QUICK).holding(profile, sys.argv[2]) as me:
    print(json.dumps({"pid": me.pid, "since": me.since}), flush=True)
    time.sleep(600)
"""


class Child:
    """A Python process running `script`; `record` is the first line it printed."""

    def __init__(self, script: str, *args: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line:
            self.process.wait(timeout=60)
            raise AssertionError(f"the child process ended before it was ready: {self.process.stderr.read()}")
        self.record = json.loads(line)

    @property
    def pid(self) -> int:
        return self.process.pid

    def since(self) -> str:
        return time.strftime("%H:%M", time.localtime(self.record["since"]))

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=60)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture(autouse=True)
def own_registry(tmp_path, monkeypatch):
    """Each test sees only the measurements it starts."""
    monkeypatch.setenv("EFFCTX_MEASURING", str(tmp_path / "measuring"))


@pytest.fixture
def children():
    started: list[Child] = []

    def start(script: str, *args: str) -> Child:
        started.append(Child(script, *args))
        return started[-1]

    yield start
    for child in started:
        child.kill()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf", n_ctx_train=N_CTX)


def tiny_plan(workload: Path) -> CertifyPlan:
    return CertifyPlan(quick=True, lengths=(512,), depths=(0.5,), seeds=1, nll_chars=600, prompt_tokens=256,
                       decode_tokens=16, rounds=2, workloads=(str(workload),), control=False, throughput_min_ratio=0.0)


def effctx(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([EFFCTX, *args], capture_output=True, text=True, timeout=600)


def partial_file(model: Path) -> Path:
    """Where certify keeps the finished stages of the model's cell."""
    profile = load_profile("exact").with_changes(n_ctx=N_CTX)
    key = cell_key(this_machine(), get_backend("llama").describe(model, profile), profile)
    return CertificateStore().root / "partial" / f"{key}.json"


# --------------------------------------------------------------------------- the registry


def test_a_live_measurement_of_another_process_is_seen_and_a_killed_one_is_not(children):
    child = children(MEASURING, "effctx bench overhead")
    assert [(m.pid, m.what, m.since) for m in others()] == [
        (child.pid, "effctx bench overhead", child.record["since"])]
    child.kill()
    assert others() == []
    assert list(registry_dir().iterdir()) == []  # its file went with the first look after it died


def test_a_measurement_that_began_and_ended_while_a_stage_ran_is_seen(children):
    with Watch(interval=0.05) as watch:
        assert watch.seen == []
        child = children(MEASURING, "effctx bench cell")
        deadline = time.monotonic() + 60
        while not watch.seen and time.monotonic() < deadline:
            time.sleep(0.05)
        child.kill()
    assert [(m.pid, m.what) for m in watch.seen] == [(child.pid, "effctx bench cell")]


# --------------------------------------------------------------------------- one certification of a cell


def test_a_second_certification_of_a_cell_refuses_naming_the_running_one(children, tiny_model):
    holder = children(HOLDING, str(tiny_model), "effctx certify", str(N_CTX))
    out = effctx(*CERTIFY_QUICK, "--model", str(tiny_model))
    assert (out.returncode, out.stderr) == (
        2, f"effctx: error: cell exact (llama) is being certified by pid {holder.pid} since {holder.since()} "
           "(effctx certify); wait for it or stop it\n")
    assert CertificateStore().scan() == []


def test_the_lock_of_a_killed_certification_is_taken_over(children, tiny_model):
    children(HOLDING, str(tiny_model), "effctx certify", str(N_CTX)).kill()
    out = effctx(*CERTIFY_QUICK, "--model", str(tiny_model), "--json")
    assert out.returncode == 0, out.stderr
    assert [c.document["cell"]["profile"] for c in CertificateStore().scan()] == ["exact"]


# --------------------------------------------------------------------------- timed stages


def test_certify_does_not_keep_a_throughput_stage_another_measurement_overlaps(children, tiny_model):
    other = children(MEASURING, "effctx bench overhead")
    out = effctx(*CERTIFY_QUICK, "--model", str(tiny_model))
    assert (out.returncode, out.stderr.splitlines()[-1:]) == (2, [
        f"effctx: error: certify exact: another effctx measurement ran during the throughput stage, pid {other.pid} "
        f"since {other.since()} (effctx bench overhead), so its figures are not kept; run `effctx certify --profile "
        "exact` again when it has finished (the finished stages are kept)"])
    assert CertificateStore().scan() == []
    assert not partial_file(tiny_model).exists()


def test_an_overlapped_workload_stage_keeps_the_finished_stages_and_the_rerun_resumes_them(children, tiny_model,
                                                                                           tmp_path):
    plan = tiny_plan(write_small_workload(tmp_path))
    profile = load_profile("exact")
    store = CertificateStore(tmp_path / "certificates")
    started: list[Child] = []

    def another_measurement_at_the_workload(message: str, done: int, total: int) -> None:
        if "workload" in message and not started:
            started.append(children(MEASURING, "console benchmark exact"))

    with pytest.raises(MeasurementOverlap) as overlap:
        Certifier(tiny_model, store, plan, another_measurement_at_the_workload).certify(profile)
    other = started[0]
    assert str(overlap.value) == (
        f"certify exact: another effctx measurement ran during the workload small stage, pid {other.pid} since "
        f"{other.since()} (console benchmark exact), so its figures are not kept; run `effctx certify --profile "
        "exact` again when it has finished (the finished stages are kept)")
    other.kill()
    done = Certifier(tiny_model, store, plan).certify(profile)
    assert done.resumed == ("nll", "passkey", "throughput")
    assert done.document["workloads"]["small"]["turns"] == 5
