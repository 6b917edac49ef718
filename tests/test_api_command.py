"""`effctx api` as a user starts it: its refusals before any model work, its ready line,
one log line per request and a clean stop on Ctrl+C."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time

import openai
import pytest

from effctx_core.backends.common.network import free_port
from tests.helpers.api_server import CHATML_TOKENS, HERMES_CHATML
from tests.helpers.cli import effctx, interruptible, one_error_line
from tests.helpers.engine_jobs import WAIT
from tests.helpers.tiny_gguf import write_tiny_llama_gguf


@pytest.fixture(scope="module")
def tiny_chatml(tmp_path_factory):
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("api-cli") / "tiny-chatml.gguf",
                                 chat_template=HERMES_CHATML, special_tokens=CHATML_TOKENS, eot_token="<|im_end|>")


def test_another_address_without_an_api_key_is_refused_before_any_work():
    line = one_error_line(effctx("api", "--host", "0.0.0.0"))
    assert line == "effctx: error: --host 0.0.0.0 is reachable from other machines: give --api-key too"


def test_a_port_in_use_is_one_line(tiny_chatml):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_error_line(effctx("api", "--model", str(tiny_chatml), "--port", str(port)))
    assert line == f"effctx: error: cannot listen on 127.0.0.1:{port}: the port is in use"


@pytest.mark.model
def test_it_serves_logs_each_request_and_stops_cleanly_on_ctrl_c(tiny_chatml, tmp_path):
    port = free_port()
    trace = tmp_path / "api.jsonl"
    proc = interruptible("api", "--model", str(tiny_chatml), "--port", str(port), "--n-ctx", "512",
                         "--state-dir", str(tmp_path / "state"), "--trace", str(trace),
                         stderr=subprocess.PIPE)
    try:
        lines = []
        deadline = time.monotonic() + WAIT
        while not any("ready on" in line for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            lines.append(proc.stderr.readline())
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=WAIT)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
                                       temperature=0)
        logged = proc.stderr.readline()
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=WAIT)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "c1 · " in logged and "prompt tokens · reused 0 · computed" in logged and "route cold" in logged
    assert proc.returncode == 130
    assert "Traceback" not in rest
    kept = list((tmp_path / "state").glob("conversations-*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())
    assert all(json.loads(line) for line in trace.read_text().splitlines())


@pytest.mark.parametrize(("args", "line"), [
    (["--api", "0.0.0.0:8080"], "effctx: error: --api 0.0.0.0:8080 is reachable from other machines: give --api-key too"),
    (["--api", "localhost:http"], "effctx: error: --api 'localhost:http': give [HOST:]PORT with a port from 1 to 65535"),
    (["--api-key", "k"], "effctx: error: --api-key is for the endpoint: give --api [HOST:]PORT too"),
    (["--api", "8080", "--demo", "chat"], "effctx: error: --api serves a model: a replay has none"),
    (["serve", "--api", "8000"], "effctx: error: --api 8000 is --port too: the endpoint and the browser consoles "
                                 "need a port each"),
    (["--endpoint", "http://127.0.0.1:8080/v1"], "effctx: error: --endpoint sends a watching console's turns: "
                                                 "give --watch FILE too"),
    (["--watch", "t.jsonl", "--demo", "chat"], "effctx: error: --replay, --demo and --watch each name a trace: give one"),
])
def test_the_console_refuses_an_endpoint_it_cannot_serve_in_one_line(args, line):
    assert one_error_line(effctx(*args)) == line
