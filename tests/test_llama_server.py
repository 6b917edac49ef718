"""The llama-server cell: what is particular to a runtime behind HTTP. A server effctx
starts lives and dies with its session; an attached one is checked before it is used and
each session has its slot to itself; reuse is reported from the server's own timings
(and /metrics agrees); slot snapshots round-trip exactly, with a file that does not fit
refused before the server sees it; token scores agree with the llama backend's; and a
server that is not there, answers garbage, hangs, or is not on loopback ends in one typed
line. The conformance suite runs the started cell as `llama-server-*`.

Most tests attach to one server this module starts as a user would (two slots, flash
attention on, q8_0 K and V: the settings the exact-snapshot claim is least obvious for)."""

from __future__ import annotations

import http.server
import os
import re
import shutil
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from effctx_core.backends.common.network import free_port
from effctx_core.backends.llama.backend import LlamaBackend
from effctx_core.backends.llama_cpp_build import find_build
from effctx_core.backends.llama_server.backend import LlamaServerBackend
from effctx_core.backends.llama_server.client import ServerClient, ServerError
from effctx_core.backends.llama_server.process import ServerStartError, start_server, user_server
from effctx_core.backends.llama_server.settings import LlamaServerOptions
from effctx_core.backends.llama_server.slots import Slot, SlotFileError
from effctx_core.backends.profile_loader import profile_from_toml
from effctx_core.contract import DecodeConfig, SessionSnapshot
from effctx_core.errors import BackendUnavailableError, EffctxError, SessionFatalError
from effctx_core.models import prepare_default_model
from effctx_core.profiles import Profile, ProfileError
from tests.helpers.cli import effctx, one_error_line
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

BUILD = find_build()
needs_build = pytest.mark.skipif(BUILD is None, reason="llama-server is not built here "
                                                       "(effctx runtime build, about 7 minutes)")
BACKEND = LlamaServerBackend()
GREEDY = DecodeConfig(max_tokens=8)
# The attached server's settings, which an attaching profile states. One thread: two
# spinning llama.cpp threads slow down a hundredfold while another test run has a core.
SERVER_SETTINGS = {"n_ctx": 512, "n_batch": 64, "threads": 1, "kv_cache_type_k": "q8_0", "kv_cache_type_v": "q8_0"}
STARTED = Profile(name="started", backend="llama-server", n_ctx=512, n_batch=64, threads=1,
                  backend_options=LlamaServerOptions())


def server_profile(**changes) -> Profile:
    base = Profile(name="server-test", backend="llama-server", **SERVER_SETTINGS,
                   backend_options=LlamaServerOptions(flash_attn=True))
    return base.with_changes(**changes)


@pytest.fixture(scope="module")
def model() -> Path:
    return prepare_default_model()


@dataclass(frozen=True)
class UserServer:
    url: str
    slot_dir: Path


@pytest.fixture(scope="module")
def server(model) -> Iterator[UserServer]:
    """A llama-server this module starts itself, as a user would: two slots of 512 tokens."""
    if BUILD is None:
        pytest.skip("llama-server is not built here (effctx runtime build)")
    with user_server(model, server_profile(), slots=2) as started:
        yield UserServer(started.url, started.slot_dir)


def attach_profile(server, **table) -> Profile:
    return server_profile(**{"server_url": server.url, "slot_dir": str(server.slot_dir), **table})


@pytest.fixture
def attached(model, server):
    session = BACKEND.open(model, attach_profile(server))
    yield session
    session.close()


def metric(client: ServerClient, name: str) -> float:
    """One counter of the server's /metrics (Prometheus text, not JSON)."""
    import urllib.request

    with urllib.request.urlopen(f"{client.url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(rf"^llamacpp:{name} (\S+)$", text, re.MULTILINE)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


# --------------------------------------------------------------------------- the profile


def test_the_built_in_profile_runs_on_llama_server():
    from effctx_core.backends.profile_loader import load_profile

    profile = load_profile("llama-server")
    assert (profile.backend, profile.backend_options.swa_full, profile.backend_options.server_url) == ("llama-server", True, "")


@pytest.mark.parametrize("table, message", [
    ('server_url = "http://10.1.2.3:8080"', "not on loopback.*allow_remote = true"),
    ('server_url = "http://example.com:8080"', "not on loopback"),
    ('server_url = "http://127.0.0.1"', "has no port"),
    ('server_url = "ftp://127.0.0.1:21"', "not an http:// or https:// address"),
    ('server_url = "http://127.0.0.1:8080/v1"', "has a path"),
    ('allow_remote = true', "only apply with server_url"),
    ('server_url = "http://127.0.0.1:8080"\ntimeout_s = 0', "timeout_s must be a positive number"),
    ('server_url = "http://127.0.0.1:8080"\nport = 1', "unknown key llama-server.port"),
])
def test_a_bad_server_table_is_refused_in_one_line(table, message):
    with pytest.raises(ProfileError, match=message) as caught:
        profile_from_toml(f'backend = "llama-server"\n[llama-server]\n{table}\n', "p", "p.toml")
    assert "\n" not in str(caught.value)


def test_a_remote_server_is_accepted_only_when_the_profile_trusts_it():
    profile = profile_from_toml('backend = "llama-server"\n[llama-server]\nserver_url = "http://10.1.2.3:8080"\n'
                                'allow_remote = true\ntimeout_s = 5\n', "p", "p.toml")
    assert profile.backend_options.allow_remote is True
    assert BACKEND.unavailable(profile) is None  # attached: no build needed


def test_without_the_build_a_started_cell_is_unavailable_and_says_why(monkeypatch, tmp_path, model):
    monkeypatch.setattr("effctx_core.backends.llama_cpp_build.build_root", lambda version=None: tmp_path / "none")
    profile = server_profile(n_ctx=512)
    reason = BACKEND.unavailable(profile)
    assert reason is not None and "llama.cpp build" in reason and "\n" not in reason
    with pytest.raises(BackendUnavailableError, match="llama.cpp build"):
        BACKEND.open(model, profile)


# --------------------------------------------------------------------------- a started server


@needs_build
def test_a_started_server_lives_and_dies_with_its_session(model):
    session = BACKEND.open(model, STARTED)
    try:
        started = session._connection.started
        assert started is not None and started.process.poll() is None
        client = ServerClient(started.url, 10)
        assert client.get("/health")["status"] == "ok"
        props = client.get("/props")
        # one slot of the profile's context; the tape holds one token less
        assert (props["total_slots"], props["default_generation_settings"]["n_ctx"]) == (1, 512)
        assert session.info.n_ctx == 511 and session.info.device == "cpu"
        # what the cells list says of the cell is what a session of it is
        assert BACKEND.describe(model, STARTED).identity == session.info.identity
        assert session.info.backend_version.startswith("llama-server ") and BUILD.commit[:12] in \
            session.info.backend_version
        session.ensure_prefix(session.tokenize("The capital of France is", True))
        assert len(list(session.decode(GREEDY))) >= 1
    finally:
        session.close()
    assert started.process.poll() is not None  # stopped, not left behind
    assert not started.folder.exists()  # its log and slot files went with it


@needs_build
def test_a_server_killed_under_a_session_poisons_it_in_one_line(model):
    session = BACKEND.open(model, STARTED)
    try:
        session.ensure_prefix(session.tokenize("Hello there", True))
        started = session._connection.started
        os.killpg(started.process.pid, signal.SIGKILL)  # the server and the shell that watches it
        started.process.wait(timeout=10)
        with pytest.raises(SessionFatalError, match=r"poisoned \((cannot reach llama-server|llama-server at \S+ "
                                                    r"dropped the connection)") as caught:
            session.prefill_suffix(session.tokenize(" and more", False))
        assert "\n" not in str(caught.value)
        with pytest.raises(SessionFatalError, match="reopen"):
            session.ensure_prefix([1])
    finally:
        session.close()


@needs_build
def test_a_server_that_cannot_load_its_model_ends_in_its_own_error_line(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ServerStartError) as caught:
        start_server(BUILD, broken, server_profile(), timeout_s=30)
    message = str(caught.value)
    assert "\n" not in message and "llama-server exited" in message
    # the cause, first, and what the server did about it, last; and the log, kept
    assert re.search(r"before it was ready: gguf_init_from_reader: bad GGUF version: 0 … .*model loading error "
                     r"\(log: (\S+)\)$", message), message
    log = Path(re.search(r"\(log: (\S+)\)$", message).group(1))
    assert log.exists()
    shutil.rmtree(log.parent)


# --------------------------------------------------------------------------- attached


@needs_build
def test_an_attached_session_is_checked_and_describes_the_server(attached, server):
    assert attached._connection.started is None
    info = attached.info
    assert (info.device, info.n_ctx) == ("attached", 511)  # a slot of 512
    assert info.capabilities.state_snapshot.supported  # slot_dir given
    assert info.identity.setting("kv_cache_type_k") == "q8_0" and info.identity.setting("flash_attn") is True
    attached.ensure_prefix(attached.tokenize("The sky is", True))
    assert [c.stop_reason for c in attached.decode(DecodeConfig(max_tokens=3))][-1] in ("max_tokens", "eog")


@needs_build
def test_a_seeded_reply_is_drawn_again_with_the_same_seed(attached):
    prompt = attached.tokenize("My favourite colour is", True)
    replies = []
    for seed in (7, 7, 8):
        attached.ensure_prefix(prompt)
        config = DecodeConfig(max_tokens=12, temperature=1.5, top_p=0.95, seed=seed)
        replies.append([c.token for c in attached.decode(config)])
    assert replies[0] == replies[1] and replies[0] != replies[2]


@needs_build
def test_each_attached_session_has_a_slot_to_itself(model, server, attached):
    second = BACKEND.open(model, attach_profile(server))
    try:
        assert (attached._server_slot.index, second._server_slot.index) == (0, 1)
        with pytest.raises(EffctxError, match="every slot of .* \\(2\\) is in use by another session"):
            BACKEND.open(model, attach_profile(server))
        # Sessions on two slots of one server keep their caches apart.
        first_words = attached.tokenize("A first conversation about the sea", True)
        second_words = second.tokenize("A second one about mountains", True)
        attached.ensure_prefix(first_words)
        second.ensure_prefix(second_words)
        assert attached.ensure_prefix(first_words + attached.tokenize(" and", False)).reused == len(first_words)
        assert attached.ledger.agrees and second.ledger.agrees
    finally:
        second.close()
    attached.close()
    BACKEND.open(model, attach_profile(server)).close()  # its slot is free again


@needs_build
def test_an_attached_session_without_slot_dir_says_it_has_no_snapshots(model, server):
    session = BACKEND.open(model, server_profile(server_url=server.url))
    try:
        claim = session.info.capabilities.state_snapshot
        assert not claim.supported and "slot_dir" in claim.reason
        with pytest.raises(EffctxError, match="slot_dir"):
            session.snapshot()
    finally:
        session.close()


@needs_build
def test_a_slot_dir_the_server_does_not_write_to_is_found_at_open(model, server, tmp_path):
    with pytest.raises(EffctxError, match="is slot_dir its --slot-save-path"):
        BACKEND.open(model, attach_profile(server, slot_dir=str(tmp_path)))


@needs_build
def test_a_server_of_another_model_is_refused(server, tmp_path):
    tiny = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    with pytest.raises(ServerError, match="serves another model"):
        BACKEND.open(tiny, attach_profile(server))


# --------------------------------------------------------------------------- reuse, by the server's figures


@needs_build
def test_reuse_is_the_servers_own_figure_and_metrics_agree(attached, server):
    client = ServerClient(server.url, 10)
    cached_before = metric(client, "prompt_tokens_cached_total")
    words = attached.tokenize("The quick brown fox jumps over the lazy dog and runs far away. " * 4, True)
    first = attached.ensure_prefix(words[:40])
    longer = attached.ensure_prefix(words)
    assert (first.reused, first.prefilled) == (0, 40)
    assert (longer.reused, longer.prefilled) == (40, len(words) - 40)
    reply = [c.token for c in attached.decode(GREEDY)]
    tape = list(attached.tokens)
    assert tape == words + reply
    # The next turn extends the tape: the decoded tokens are reused (the last one is
    # evaluated by this request, as the server does, and counts as reused).
    turn = attached.ensure_prefix(tape + attached.tokenize(" Then it", False))
    assert turn.reused == len(tape)
    ledger = attached.ledger
    assert ledger.agrees, list(ledger.differences)
    assert metric(client, "prompt_tokens_cached_total") - cached_before == ledger.cached
    counts = attached.explain().runtime_counts
    assert counts is not None and counts.agree


@needs_build
def test_a_slot_emptied_behind_the_sessions_back_is_reported_as_recomputed(attached, server):
    words = attached.tokenize("One two three four five six seven eight nine ten.", True)
    attached.ensure_prefix(words)
    Slot(ServerClient(server.url, 10), 0, None).erase()  # someone else's doing
    extended = attached.ensure_prefix(words + attached.tokenize(" Eleven", False))
    # The tape says every word was resident; the server says it kept none: its figure wins.
    assert (extended.reused, extended.prefilled) == (0, len(words) + len(attached.tokenize(" Eleven", False)))
    assert not attached.ledger.agrees
    assert "effctx expected" in attached.ledger.differences[-1]


# --------------------------------------------------------------------------- slot snapshots


@needs_build
def test_a_slot_snapshot_continues_exactly_and_its_slot_is_reused(attached):
    attached.ensure_prefix(attached.tokenize("Once upon a time, in a small village by the sea,", True))
    list(attached.decode(DecodeConfig(max_tokens=5)))  # its last token is not in the slot yet
    snap = attached.snapshot()
    first = [c.token for c in attached.decode(GREEDY)]
    attached.ensure_prefix(attached.tokenize("Something else entirely.", True))
    attached.restore(snap)
    assert list(attached.tokens) == list(snap.tokens)
    before = attached.ledger.cached
    again = [c.token for c in attached.decode(GREEDY)]
    assert again == first
    # the restored slot served the reply: all but the token the slot had not evaluated
    assert attached.ledger.cached - before == snap.n_tokens - 1


@needs_build
def test_a_slot_file_of_other_tokens_is_refused_before_the_server_sees_it(attached):
    tape = attached.tokenize("The first conversation", True)
    attached.ensure_prefix(tape)
    snap = attached.snapshot()
    other = SessionSnapshot(snap.identity, tuple(attached.tokenize("Another tape altogether", True)), snap.state)
    before = attached.ledger.requests
    with pytest.raises(SlotFileError, match="other tokens"):
        attached.restore(other)
    with pytest.raises(SlotFileError, match="cut short"):
        attached.restore(SessionSnapshot(snap.identity, snap.tokens, snap.state[:20]))
    assert attached.ledger.requests == before and not attached.explain().poisoned
    assert attached.ensure_prefix(tape).reused == len(tape)


@needs_build
def test_a_slot_file_the_server_refuses_leaves_the_session_as_it_was(attached):
    tape = attached.tokenize("The first conversation, and its second sentence.", True)
    attached.ensure_prefix(tape)
    snap = attached.snapshot()
    cut = SessionSnapshot(snap.identity, snap.tokens, snap.state[:-1000])  # its tokens intact, its cache not
    with pytest.raises(SlotFileError, match="refused a slot restore.*evaluated into the slot again"):
        attached.restore(cut)
    assert list(attached.tokens) == tape and not attached.explain().poisoned
    # The server emptied the slot; the session put its tape back: the next request reuses it.
    extended = attached.ensure_prefix(tape + attached.tokenize(" And a third.", False))
    assert extended.reused == len(tape) and attached.ledger.agrees


# --------------------------------------------------------------------------- the tiny model, against llama


@needs_build
@pytest.mark.model
def test_replies_and_scores_match_the_llama_backend_token_for_token(tmp_path):
    """The tiny model's random weights decode byte tokens that end inside a UTF-8
    character, which the server streams without their ids: the reply still matches
    llama's greedy reply id for id, and such tokens are scored too."""
    tiny = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    results = {}
    for backend in (BACKEND, LlamaBackend()):
        profile = Profile(name="tiny", backend=backend.name, n_ctx=512, n_batch=64, threads=1)
        session = backend.open(tiny, profile)
        try:
            prompt = session.tokenize("the quick brown fox", True)
            session.ensure_prefix(prompt)
            reply = [c.token for c in session.decode(DecodeConfig(max_tokens=60))]
            session.ensure_prefix([])
            scores = session.score_suffix(prompt + reply[:24]).logprobs
            results[backend.name] = (reply, scores, session.detokenize(reply))
        finally:
            session.close()
    (mine, my_scores, text), (theirs, their_scores, _) = results["llama-server"], results["llama"]
    assert mine == theirs
    assert "\ufffd" in text  # the reply has a byte token that is no character by itself
    np.testing.assert_allclose(my_scores[1:], their_scores[1:], rtol=0, atol=1e-3)


def test_decode_logprobs_match_the_llama_backend_token_for_token(tmp_path):
    """Byte tokens the server streams without their probabilities included: those are
    read from every token's, asked for at the same position."""
    tiny = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    replies = {}
    for backend in (BACKEND, LlamaBackend()):
        session = backend.open(tiny, Profile(name="tiny", backend=backend.name, n_ctx=512, n_batch=64, threads=1))
        try:
            session.ensure_prefix(session.tokenize("the quick brown fox", True))
            replies[backend.name] = list(session.decode(DecodeConfig(max_tokens=60, logprobs=3)))
            text = session.detokenize([c.token for c in replies[backend.name]])
        finally:
            session.close()
    mine, theirs = replies["llama-server"], replies["llama"]
    assert "\ufffd" in text  # the reply has a byte token that is no character by itself
    assert [(c.token, [i for i, _ in c.top]) for c in mine] == [(c.token, [i for i, _ in c.top]) for c in theirs]
    np.testing.assert_allclose([[c.logprob] + [v for _, v in c.top] for c in mine],
                               [[c.logprob] + [v for _, v in c.top] for c in theirs], rtol=0, atol=1e-3)


# --------------------------------------------------------------------------- bad servers


@contextmanager
def fake_server(answer) -> Iterator[str]:
    """A loopback HTTP server whose every GET and POST does `answer(handler)`."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            answer(self)

        do_POST = do_GET

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def garbage(handler) -> None:
    body = b"<html>hello, I am not llama-server</html>"
    handler.send_response(200)
    handler.send_header("Content-Type", "text/html")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def asleep(handler) -> None:
    time.sleep(3)


def remote_profile(url: str, **table) -> Profile:
    return Profile(name="attach", backend="llama-server", n_ctx=512,
                   backend_options=LlamaServerOptions(server_url=url, **table))


def test_an_unreachable_server_is_one_typed_line(model):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerError, match=f"cannot reach llama-server at {url}") as caught:
        BACKEND.open(model, remote_profile(url))
    assert "\n" not in str(caught.value)


def test_a_server_that_answers_garbage_is_one_typed_line(model):
    with fake_server(garbage) as url:
        with pytest.raises(ServerError, match="is not JSON: '<html>hello, I am not llama-server</html>'") as caught:
            BACKEND.open(model, remote_profile(url))
    assert "\n" not in str(caught.value)


def test_a_server_that_does_not_answer_is_given_up_on_in_time(model):
    with fake_server(asleep) as url:
        with pytest.raises(ServerError, match="did not answer GET /props within 0.5 s"):
            BACKEND.open(model, remote_profile(url, timeout_s=0.5))


def test_the_cli_ends_a_bad_server_in_one_line_and_exit_2(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    down = tmp_path / "down.toml"
    down.write_text(f'backend = "llama-server"\nn_ctx = 512\n[llama-server]\nserver_url = "{url}"\n')
    assert "cannot reach llama-server" in one_error_line(effctx("run", "--profile", str(down), "--prompt", "hi"))
    remote = tmp_path / "remote.toml"
    remote.write_text('backend = "llama-server"\n[llama-server]\nserver_url = "http://192.0.2.7:8080"\n')
    assert "allow_remote" in one_error_line(effctx("run", "--profile", str(remote), "--prompt", "hi"))
    with fake_server(garbage) as url:
        junk = tmp_path / "junk.toml"
        junk.write_text(f'backend = "llama-server"\nn_ctx = 512\n[llama-server]\nserver_url = "{url}"\n')
        assert "is not JSON" in one_error_line(effctx("run", "--profile", str(junk), "--prompt", "hi"))


# --------------------------------------------------------------------------- the benchmark's control


@needs_build
def test_a_llama_cell_runs_beside_the_llama_server_control(model, tmp_path):
    from effctx_core.backends.profile_loader import load_profile
    from effctx_core.bench.workload_run import run_workload
    from effctx_core.bench.workloads import load_workload
    from tests.helpers.small_workload import write_small_workload

    workload = load_workload(str(write_small_workload(tmp_path)))
    report = run_workload(model, load_profile("exact").with_changes(threads=1), workload,
                          control_backend="llama-server")
    assert report.control_name == "/completion streamed (llama-server)" and report.accounting_agrees
    assert all(t.control is not None and t.control.generated > 0 for t in report.turns)


def test_the_llama_server_control_takes_only_llama_cpp_settings(model):
    from effctx_core.backends.profile_loader import load_profile
    from effctx_core.bench.workload_run import control_baseline

    with pytest.raises(EffctxError, match="llama-server control cannot run profile 'ov-evict'.*u8") as caught:
        control_baseline(model, load_profile("ov-evict"), "llama-server")
    assert "\n" not in str(caught.value)
    out = effctx("bench", "run", "agent-loop", "--no-control", "--control", "llama-server")
    assert "--no-control and --control exclude each other" in one_error_line(out)
