"""The llama cell on ggml RPC workers: where llama.cpp put the model, that it answers as
the local cell does, and that a worker that dies, stops or was never there gives a typed
error naming it, within a bound, never a hang or a dead console.

The conformance suite runs through two loopback workers as the `llama-rpc` cells; this
module tests what is particular to workers. Each test that needs workers starts its own,
so a killed or stopped one never reaches another test."""

from __future__ import annotations

import os
import signal
import socket
import struct
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from effctx_core.backends.common.network import free_port
from effctx_core.backends.llama.backend import LlamaBackend
from effctx_core.backends.llama.rpc_endpoints import PROTOCOL, say_hello
from effctx_core.backends.llama.rpc_host import check_placement
from effctx_core.backends.llama.rpc_local import local_workers
from effctx_core.backends.llama.rpc_placement import parse_placement
from effctx_core.backends.llama.settings import LlamaOptions
from effctx_core.backends.llama_cpp_build import find_build
from effctx_core.backends.profile_loader import profile_from_toml
from effctx_core.contract import DecodeConfig
from effctx_core.errors import EffctxError, RpcWorkerError
from effctx_core.models import prepare_default_model
from effctx_core.profiles import Profile, ProfileError
from tests.helpers.cli import effctx, one_error_line
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

BUILD = find_build()
needs_build = pytest.mark.skipif(BUILD is None, reason="effctx's llama.cpp build with RPC is not there "
                                                       "(make llama-cpp)")
PROMPT = "The capital of France is"


def rpc_profile(workers, **changes) -> Profile:
    base = Profile(name="rpc-test", n_ctx=512, n_batch=64,
                   backend_options=LlamaOptions(rpc_workers=tuple(w.endpoint for w in workers)))
    return base.with_changes(**changes)


@pytest.fixture(scope="module")
def model() -> Path:
    return prepare_default_model()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny random-weight model, for tests whose checks hold for any model: a run on it
    takes a fraction of the default model's on two single-threaded workers."""
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


# --------------------------------------------------------------------------- the profile


def test_rpc_workers_is_a_list_of_host_port_strings():
    profile = profile_from_toml('rpc_workers = ["127.0.0.1:50052", "[::1]:50053"]\n', "p", "p.toml")
    assert profile.backend_options.rpc_workers == ("127.0.0.1:50052", "[::1]:50053")


@pytest.mark.parametrize("toml, message", [
    ('rpc_workers = "127.0.0.1:50052"', "rpc_workers must be list, not str"),
    ('rpc_workers = [50052]', "rpc_workers must be a list of strings"),
    ('rpc_workers = ["localhost"]', "rpc_workers: 'localhost' is not host:port"),
    ('rpc_workers = ["h:99999"]', "port '99999' is not a number from 1 to 65535"),
    ('rpc_workers = ["h:1", "h:1"]', "rpc_workers names a worker twice"),
    ('rpc_timeout_s = 0', "rpc_timeout_s must be a positive number of seconds"),
    ('backend = "openvino"\nrpc_workers = ["h:1"]', "rpc_workers is a setting the openvino backend does not read"),
])
def test_a_bad_rpc_setting_is_refused_in_one_line(toml, message):
    with pytest.raises(ProfileError, match=message):
        profile_from_toml(toml + "\n", "p", "p.toml")


# --------------------------------------------------------------------------- HELLO before llama.cpp


@contextmanager
def fake_worker(answer) -> Iterator[str]:
    """A loopback server that reads one HELLO and does `answer(conn)`."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(1 + 8 + 24)
            answer(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.close()


def test_a_worker_that_is_down_is_named():
    endpoint = f"127.0.0.1:{free_port()}"
    with pytest.raises(RpcWorkerError, match=f"RPC worker {endpoint} is down \\(connection refused\\)") as err:
        say_hello(endpoint, timeout=2)
    assert err.value.worker == endpoint


def test_a_worker_of_another_protocol_version_is_refused():
    older = struct.pack("<Q", 28) + bytes([6, 0, 0, 0]) + bytes(24)
    with fake_worker(lambda conn: conn.sendall(older)) as endpoint:
        with pytest.raises(RpcWorkerError, match=f"speaks protocol 6.0.0, effctx's llama.cpp build speaks "
                                                 f"{'.'.join(map(str, PROTOCOL))}"):
            say_hello(endpoint, timeout=2)


def test_a_server_that_hangs_up_at_hello_is_not_a_worker():
    with fake_worker(lambda conn: None) as endpoint:
        with pytest.raises(RpcWorkerError, match="closed the connection at HELLO: not a ggml RPC worker"):
            say_hello(endpoint, timeout=2)


def test_a_server_that_never_answers_is_given_up_on_in_time():
    with fake_worker(lambda conn: time.sleep(3)) as endpoint:
        t0 = time.monotonic()
        with pytest.raises(RpcWorkerError, match="did not answer within 0.5 s"):
            say_hello(endpoint, timeout=0.5)
    assert time.monotonic() - t0 < 3


@needs_build
def test_the_protocol_effctx_checks_is_the_one_its_build_speaks():
    assert BUILD is not None
    header = (BUILD.root / "src" / "ggml" / "include" / "ggml-rpc.h").read_text()
    for name, value in zip(("MAJOR", "MINOR", "PATCH"), PROTOCOL):
        assert f"#define RPC_PROTO_{name}_VERSION    {value}" in header


# --------------------------------------------------------------------------- placement


LOG = """load_tensors: layer   0 assigned to device RPC0, is_swa = 1
load_tensors: layer   1 assigned to device RPC1, is_swa = 0
load_tensors: layer   2 assigned to device RPC1, is_swa = 0
load_tensors:   CPU_Mapped model buffer size =   170.00 MiB
load_tensors: RPC0[127.0.0.1:50061] model buffer size =    36.00 MiB
load_tensors: RPC0[127.0.0.1:50062] model buffer size =   199.00 MiB
llama_kv_cache: RPC0[127.0.0.1:50061] KV buffer size =    10.00 MiB
llama_kv_cache: RPC1[127.0.0.1:50062] KV buffer size =     8.00 MiB
""".splitlines()
DEVICES = {"RPC0": "127.0.0.1:50061", "RPC1": "127.0.0.1:50062"}


def test_placement_is_read_per_worker_by_the_endpoint_each_buffer_names():
    placement = parse_placement(LOG, DEVICES, 2)
    first, second = placement.workers
    assert (first.where, first.layers, first.model_bytes, first.kv_bytes) == ("127.0.0.1:50061", (0,), 36 << 20, 10 << 20)
    assert (second.where, second.layers, second.model_bytes, second.kv_bytes) == \
        ("127.0.0.1:50062", (1,), 199 << 20, 8 << 20)
    assert (first.output_head, second.output_head) == (False, True)
    assert (first.layer_text, second.layer_text) == ("layer 0", "layer 1 + output head")
    assert placement.local_model_bytes == 170 << 20


def test_a_model_left_on_this_cpu_is_refused():
    on_cpu = [line.replace("RPC1", "CPU") if "assigned" in line else line for line in LOG]
    with pytest.raises(EffctxError, match=r"did not land on the RPC workers: llama.cpp kept 2 of 3 layers on this "
                                          r"machine's CPU \(layers 1-2\)"):
        check_placement(parse_placement(on_cpu, DEVICES, 3), 3)


@needs_build
def test_the_model_and_its_cache_are_split_over_both_workers(model):
    backend = LlamaBackend()
    with local_workers(2) as workers:
        profile = rpc_profile(workers)
        session = backend.open(model, profile)
        try:
            info = session.info
            report = backend.capacity_report(info, profile, 1 << 30).to_dict()
        finally:
            session.close()
    shares = info.placement
    assert [s.where for s in shares] == [w.endpoint for w in workers]
    held = sorted(i for s in shares for i in s.layers)
    assert held == list(range(info.facts.n_layers))
    assert [s.output_head for s in shares] == [False, True]  # llama.cpp puts the head on the last worker
    assert all(s.layers and s.model_bytes > 0 for s in shares)
    assert [p["kv_bytes"] for p in report["placement"]] == [p["kv_bytes_modeled"] for p in report["placement"]]
    assert sum(s.kv_bytes for s in shares) == report["layer_profile"]["cache_bytes"]
    assert info.device.startswith("rpc: ")
    assert info.backend_version.startswith(f"{backend.version()}+rpc.")
    # A state copy would cross the network both ways: the windowed layers keep every position.
    assert (info.capabilities.rollback_floor, info.capabilities.rollback_reason) == (
        None, "swa_full keeps every sliding-window position")


@needs_build
def test_the_baseline_runs_on_the_workers_and_a_session_after_it_still_finds_its_placement(tiny):
    backend = LlamaBackend()
    with local_workers(1) as workers:
        profile = rpc_profile(workers)
        baseline = backend.baseline(tiny, profile)
        try:
            session = backend.open(tiny, profile)
            prompt = session.tokenize(PROMPT, True)
            run = baseline.raw(prompt, 8)
            session.ensure_prefix(prompt)
            decoded = tuple(chunk.token for chunk in session.decode(DecodeConfig(max_tokens=8)))
            assert session.info.placement[0].layers
            session.close()
        finally:
            baseline.close()
    assert run.tokens == decoded


@needs_build
def test_greedy_output_on_workers_is_the_local_output(model):
    backend = LlamaBackend()
    # 16 tokens: at the 19th the local top two logits are 0.15 apart (506 at 21.17, 5628 at
    # 21.02), and the workers' kernels and the in-process CPU kernels of the same build
    # round differently enough to pick the other one there.
    config = DecodeConfig(max_tokens=16)

    def answer(profile: Profile) -> list[int]:
        session = backend.open(model, profile)
        try:
            session.ensure_prefix(session.tokenize(PROMPT, True))
            return [chunk.token for chunk in session.decode(config)]
        finally:
            session.close()

    with local_workers(2) as workers:
        remote = answer(rpc_profile(workers))
    assert remote == answer(Profile(name="local", n_ctx=512, n_batch=64))


# --------------------------------------------------------------------------- faults


def decode_until_killed(session, kill) -> float:
    """Decode, call `kill` after the fourth token, and return how long the error took."""
    session.ensure_prefix(session.tokenize(PROMPT, True))
    killed_at = None
    for chunk in session.decode(DecodeConfig(max_tokens=400, slide=True)):
        if chunk.index == 3:
            kill()
            killed_at = time.monotonic()
    raise AssertionError(f"the decode outlived its worker ({killed_at})")


@needs_build
def test_a_worker_killed_mid_decode_poisons_the_session_and_is_named(tiny):
    with local_workers(2) as workers:
        session = LlamaBackend().open(tiny, rpc_profile(workers))
        try:
            victim = workers[1]
            with pytest.raises(RpcWorkerError, match=f"RPC worker {victim.endpoint} is down") as err:
                decode_until_killed(session, lambda: os.kill(victim.pid, signal.SIGKILL))
            assert err.value.worker == victim.endpoint
            assert "the session is poisoned" in str(err.value)
            with pytest.raises(RpcWorkerError):
                session.tokenize("still there?", False)
            assert session.explain().poisoned
        finally:
            session.close()


@needs_build
def test_a_worker_killed_mid_prefill_poisons_the_session_and_is_named(tiny):
    with local_workers(2) as workers:
        session = LlamaBackend().open(tiny, rpc_profile(workers))
        victim = workers[0]

        def kill_after_the_first_chunk(progress) -> None:
            if progress.done == progress.chunk_tokens:
                os.kill(victim.pid, signal.SIGKILL)

        try:
            prompt = session.tokenize("The grass is green. " * 30, True)  # 302 tokens: five chunks
            with pytest.raises(RpcWorkerError, match=f"ensure prefix failed: RPC worker {victim.endpoint} is down"):
                session.ensure_prefix(prompt, progress=kill_after_the_first_chunk)
        finally:
            session.close()


@needs_build
def test_a_worker_that_stops_answering_is_given_up_on_after_rpc_timeout_s(tiny):
    with local_workers(2) as workers:
        session = LlamaBackend().open(tiny, rpc_profile(workers, rpc_timeout_s=2.0))
        victim = workers[0]
        try:
            t0 = time.monotonic()
            with pytest.raises(RpcWorkerError, match=f"RPC worker {victim.endpoint} did not answer") as err:
                decode_until_killed(session, lambda: os.kill(victim.pid, signal.SIGSTOP))
            # the stall bound, then a bounded HELLO probe of each worker
            assert time.monotonic() - t0 < 2.0 + 2 * 2.0 + 5
            assert err.value.worker == victim.endpoint
        finally:
            os.kill(victim.pid, signal.SIGCONT)
            session.close()


@needs_build
def test_the_workers_are_free_for_another_client_once_the_last_session_closes(tiny):
    with local_workers(1) as workers:
        profile = rpc_profile(workers)
        first = LlamaBackend().open(tiny, profile)
        second = LlamaBackend().open(tiny, profile)  # the same host: a worker serves one client
        assert first.host is second.host  # type: ignore[attr-defined]
        host_pid = first.host.pid  # type: ignore[attr-defined]
        first.close()
        second.close()
        assert say_hello(workers[0].endpoint, timeout=5).version == PROTOCOL
        with pytest.raises(ProcessLookupError):
            for _ in range(50):
                os.kill(host_pid, 0)
                time.sleep(0.1)


# --------------------------------------------------------------------------- the commands


def test_a_profile_whose_worker_is_down_ends_in_one_line(tmp_path):
    endpoint = f"127.0.0.1:{free_port()}"
    profile = tmp_path / "rpc.toml"
    profile.write_text(f'n_ctx = 512\n[llama]\nrpc_workers = ["{endpoint}"]\n')
    out = effctx("run", "--profile", str(profile), "--prompt", "hi", "--max-tokens", "4")
    line = one_error_line(out)
    assert (f"RPC worker {endpoint} is down" in line) or ("effctx's llama.cpp build" in line)


@needs_build
def test_worker_refuses_a_port_in_use_in_one_line():
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        line = one_error_line(effctx("worker", "--port", str(port), timeout=30))
    assert line == f"effctx: error: cannot serve on 127.0.0.1:{port}: Address already in use"


def test_worker_without_the_build_says_how_to_get_it(tmp_path):
    line = one_error_line(effctx("worker", env={"XDG_CACHE_HOME": str(tmp_path)}, timeout=30))
    assert "effctx worker needs effctx's llama.cpp build with RPC and llama-server, which is not there" in line


@needs_build
def test_worker_warns_loudly_off_loopback_and_stops_cleanly_on_ctrl_c():
    import subprocess
    import sys

    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).with_name("effctx")), "worker", "--host", "0.0.0.0",
                             "--port", str(port), "--threads", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                say_hello(f"127.0.0.1:{port}", timeout=1)
                break
            except RpcWorkerError:
                time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert "WARNING: the ggml RPC protocol has no authentication and no encryption" in err
    assert "Traceback" not in err
    assert out.splitlines()[-1] == "effctx worker: stopped"


# --------------------------------------------------------------------------- what states cost


@needs_build
def test_the_prefix_cache_recomputes_where_a_restore_costs_more_and_says_why(model, tmp_path):
    from effctx_core.engine import SessionEngine
    from effctx_core.snapshots import SnapshotStore

    store = SnapshotStore(tmp_path / "store")
    with local_workers(2) as workers:
        engine = SessionEngine(model, rpc_profile(workers, n_ctx=1024), prefix_cache=store)
        info = engine.open()
        try:
            costs = info.state_costs
            assert costs is not None and costs.tokens == 128
            assert f"save {costs.save_ms:.0f} ms, restore {costs.restore_ms:.0f} ms" in \
                info.capabilities.state_snapshot.reason
            loaded = engine.load_prefix("The grass is green. " * 40)
        finally:
            engine.close()
    if costs.restore_beats_prefill:
        assert loaded.cache == "miss"
    else:
        assert loaded.cache == "recompute"
        assert loaded.message is not None and loaded.message.startswith(
            "prefix recomputed, not restored: a restore costs more than a prefill on this cell")
        assert store.ls() == []


@needs_build
def test_a_turn_checkpoint_keeps_no_state_where_a_restore_costs_more(model, tmp_path):
    from effctx_core.engine import SessionEngine
    from effctx_core.snapshots import SnapshotStore

    store = SnapshotStore(tmp_path / "checkpoints")
    events = []
    with local_workers(1) as workers:
        engine = SessionEngine(model, rpc_profile(workers), checkpoints=store)
        info = engine.open()
        engine.subscribe(events.append)
        try:
            engine.complete("The capital of France is", DecodeConfig(max_tokens=4))
            node = engine.tree.current
            assert node is not None
            restored = engine.restore_node(engine.tree.root.id)  # type: ignore[union-attr]
            back = engine.restore_node(node)
        finally:
            engine.close()
    assert info.state_costs is not None
    added = [e for e in events if e.kind == "node"]
    if info.state_costs.restore_beats_prefill:
        assert added[-1].blob != ""
        return
    assert added[-1].blob == "" and added[-1].message.startswith(
        "state not saved: a restore costs more than a prefill on this cell (measured on a 128-token state")
    assert store.ls() == []
    assert (restored.mode, back.mode, back.reason) == ("recompute", "recompute", "the node has no saved state")


def test_a_local_cell_has_no_state_costs_to_weigh(model):
    session = LlamaBackend().open(model, Profile(name="local", n_ctx=256, n_batch=64))
    try:
        assert session.info.state_costs is None and session.info.placement == ()
    finally:
        session.close()


@needs_build
def test_the_certificate_of_a_cell_on_workers_says_what_runs_where_and_what_states_cost(tiny, tmp_path):
    from effctx_core.certify.runner import Certifier
    from effctx_core.certify.schema import first_problem
    from effctx_core.certify.store import CertificateStore
    from tests.helpers.certify import tiny_plan
    from tests.helpers.small_workload import write_small_workload

    (tmp_path / "workload").mkdir()
    plan = tiny_plan(write_small_workload(tmp_path / "workload"))
    with local_workers(2) as workers:
        done = Certifier(tiny, CertificateStore(tmp_path / "certificates"), plan).certify(rpc_profile(workers, n_ctx=1024))
    cell = done.document["cell"]
    assert first_problem(done.document) is None
    assert cell["device"].startswith("rpc: ")
    assert [share["where"] for share in cell["placement"]] == [w.endpoint for w in workers]
    assert set(cell["state_costs"]) == {"tokens", "prefill_ms", "save_ms", "restore_ms"}
    assert cell["backend_version"].endswith(f"+rpc.{BUILD.commit[:7]}")  # type: ignore[union-attr]
