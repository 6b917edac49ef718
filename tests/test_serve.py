"""`effctx serve`: the console served to a real (headless) browser, on loopback only."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Callable
from urllib.parse import urljoin, urlsplit

import openai
import pytest

from effctx_core.events.reader import read_trace
from effctx_core.snapshots.tree_file import read_tree_file
from effctx_tui import serve as serve_mod
from effctx_tui.options import ENDPOINT_KEY_ENV
from tests.helpers import headless_chromium
from tests.helpers.api_server import CHATML_TOKENS, HERMES_CHATML
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

DEMO_TRACE = Path(serve_mod.__file__).with_name("demos") / "chat.jsonl"
_CSI = re.compile(r"\x1b(\[[0-9;?$]*[A-Za-z]|\][^\x07]*\x07)")


class FakeServer:
    """Stands in for textual-serve's Server: records what it was given, listens nowhere."""

    made: list["FakeServer"] = []
    while_serving: Callable[[], None] = staticmethod(lambda: None)  # what a test looks at while it "serves"

    def __init__(self, command, host, port, title, public_url, templates_path):
        self.command, self.host, self.port, self.title, self.public_url = command, host, port, title, public_url
        self.templates_path = templates_path
        FakeServer.made.append(self)

    def serve(self):
        FakeServer.while_serving()


@pytest.fixture
def fake_server(monkeypatch):
    import textual_serve.server

    FakeServer.made = []
    monkeypatch.setattr(FakeServer, "while_serving", staticmethod(lambda: None))
    monkeypatch.setattr(textual_serve.server, "Server", FakeServer)
    return FakeServer.made


@pytest.fixture
def gguf_files(tmp_path, monkeypatch):
    """Files that pass the up-front model check (a GGUF magic), in the working directory."""
    monkeypatch.chdir(tmp_path)
    for name in ("m.gguf", "x y.gguf"):
        (tmp_path / name).write_bytes(b"GGUF" + bytes(60))
    return tmp_path


def test_console_options_reach_the_served_console_and_loopback_is_the_default(fake_server, capsys, gguf_files):
    port = _free_port()
    argv = ["--port", str(port), "--model", str(gguf_files / "x y.gguf"), "--max-tokens", "7", "--no-checkpoints"]
    assert serve_mod.serve(argv) == 0
    (server,) = fake_server
    assert (server.host, server.port, server.public_url) == ("127.0.0.1", port, f"http://127.0.0.1:{port}")
    assert server.command == (f"EFFCTX_SERVED=1 exec {sys.executable} -m effctx_tui.main --model '{gguf_files / 'x y.gguf'}' "
                              "--max-tokens 7 --no-checkpoints")
    out, err = capsys.readouterr()
    assert f"http://127.0.0.1:{port}" in out and "warning" not in err


def test_another_address_only_when_asked_and_with_a_warning(fake_server, capsys, gguf_files):
    assert serve_mod.serve(["--host", "0.0.0.0", "--port", str(_free_port()), "--model", "m.gguf"]) == 0
    assert fake_server[0].host == "0.0.0.0"
    assert "reachable from the network" in capsys.readouterr().err


def test_bad_console_options_are_refused_before_serving(fake_server, capsys):
    assert serve_mod.serve(["--max-tokens", "many"]) == 2
    assert not fake_server and "--max-tokens" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"effctx serve exited with {proc.returncode}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listens on port {port} after {timeout:.0f} s")


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        for child in (task / "children").read_text().split():
            found |= {int(child)} | _descendants(int(child))
    return found


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@contextmanager
def _running_server(tmp_path: Path, *serve_args: str):
    """`effctx serve` on a free port: (server, port), once it listens. The server is
    stopped (SIGTERM) on the way out if the test left it running."""
    port = _free_port()
    with (tmp_path / "serve.log").open("w") as log:
        server = subprocess.Popen([sys.executable, "-m", "effctx_tui.main", "serve", "--port", str(port), *serve_args],
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_for_port(port, server, timeout=60)
            yield server, port
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGTERM)
                try:
                    server.wait(20)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()


@asynccontextmanager
async def _served_page(tmp_path: Path, *serve_args: str):
    """`effctx serve` and a headless browser page showing its console: (server, page,
    port), once the console's first bytes have arrived."""
    if not headless_chromium.available():
        pytest.skip(f"{headless_chromium.CHROMIUM} is missing (.ci/run installs it)")
    with _running_server(tmp_path, *serve_args) as (server, port):
        async with headless_chromium.open_page(tmp_path / "chromium") as page:
            await page.call("Page.navigate", url=f"http://127.0.0.1:{port}/")
            # textual-serve marks the body once the console's first bytes arrive.
            await page.wait_for("document.body.classList.contains('-first-byte')", timeout=60)
            yield server, page, port


async def _outliving(consoles: set[int], seconds: float) -> list[int]:
    """The consoles still running after `seconds`; each is then ended (they are ours:
    started by the server the test started)."""
    deadline = time.monotonic() + seconds
    while any(map(_running, consoles)) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    left = [pid for pid in consoles if _running(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.slow
async def test_a_browser_shows_the_served_console(default_model, tmp_path):
    async with _served_page(tmp_path) as (server, page, port):
        terminal = "window.__terminalText.replace(/\\x1b(\\[[0-9;?$]*[A-Za-z]|\\][^\\x07]*\\x07)/g, '')"
        # The title is drawn at once; the model's name only once the engine is open.
        await page.wait_for(f"{terminal}.includes('effctx') && {terminal}.includes('Gemma 3')", timeout=90)
        # Keys typed in the browser reach the console's prompt and come back drawn.
        await page.evaluate("document.querySelector('.xterm-helper-textarea').focus()")
        await page.call("Input.insertText", text="hello from chromium")
        await page.wait_for(f"{terminal}.includes('hello from chromium')", timeout=30)
        await asyncio.sleep(0.5)  # xterm.js paints on the next animation frame
        colours = await page.screenshot(tmp_path / "console.png")
        # The intro card is hidden once bytes arrive, so what is drawn is the
        # console: its canvas text gives many colours (anti-aliasing), a blank
        # or failed terminal one or two.
        assert colours > 20, f"the screenshot looks blank ({colours} colours): {tmp_path / 'console.png'}"
        assert not await page.evaluate("document.body.classList.contains('-closed')")
        consoles = _descendants(server.pid)
        assert consoles, "no console process was started"
    output = (tmp_path / "serve.log").read_text()
    assert f"http://127.0.0.1:{port}" in output
    left = await _outliving(consoles, 10)
    assert not left, f"console processes outlived the server: {left}"
    assert server.returncode == 0, output


async def test_the_consoles_end_when_the_server_is_killed(tmp_path):
    async with _served_page(tmp_path, "--demo", "chat") as (server, page, port):
        consoles = _descendants(server.pid)
        assert consoles, "no console process was started"
        server.kill()  # SIGKILL: the server stops nothing itself
        server.wait()
        left = await _outliving(consoles, 15)
    assert not left, f"console processes outlived the killed server: {left}"


def test_a_prefix_file_is_checked_once_and_passed_on_as_an_absolute_path(fake_server, capsys, tmp_path, gguf_files):
    (tmp_path / "notes.txt").write_text("Notes.", encoding="utf-8")
    assert serve_mod.serve(["--model", "m.gguf", "--prefix-file", "missing.txt"]) == 2
    assert not fake_server and capsys.readouterr().err == "effctx: error: prefix file not found: missing.txt\n"
    assert serve_mod.serve(["--model", "m.gguf", "--port", str(_free_port()), "--prefix-file", "notes.txt"]) == 0
    assert fake_server[0].command.endswith(f"--prefix-file {tmp_path / 'notes.txt'}")


# What a page or stylesheet loads: src= and href= of its elements, url(…) and @import of its CSS.
_LOADED = re.compile(r"""(?:\b(?:src|href)\s*=\s*"([^"]+)")|(?:url\(\s*["']?([^"')]+)["']?\s*\))|(?:@import\s+["']([^"']+)["'])""")
# Every http(s) address named in a text, but an SVG's xmlns (a name, never fetched).
_NAMED = re.compile(r"""(?<!xmlns=")\bhttps?://[^\s"'<>)]+""")
# Comments load nothing (xterm.css credits term.js and jslinux by their addresses).
_COMMENT = re.compile(r"/\*.*?\*/|<!--.*?-->", re.DOTALL)


def _get(url: str) -> tuple[str, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200, url
        return response.headers.get_content_type(), response.read()


def test_the_served_page_and_what_it_loads_name_no_host_but_the_server(tmp_path):
    # effctx runs offline: the browser console's page (textual-serve's, which links a
    # web font from a font CDN) must load everything, the font too, from the server.
    with _running_server(tmp_path, "--demo", "chat") as (_, port):
        server = f"127.0.0.1:{port}"
        pending, seen, named = [f"http://{server}/"], set(), set()
        while pending:
            url = pending.pop()
            seen.add(url)
            kind, body = _get(url)
            if kind not in ("text/html", "text/css"):
                continue  # scripts, fonts, images: fetched (they exist), not followed
            text = _COMMENT.sub("", body.decode("utf-8"))
            named |= {urlsplit(found).netloc for found in _NAMED.findall(text)}
            for groups in _LOADED.findall(text):
                target = urljoin(url, next(group for group in groups if group))
                if urlsplit(target).scheme in ("http", "https") and target not in seen:
                    pending.append(target)
    assert named == {server}
    assert {urlsplit(url).netloc for url in seen} == {server}
    assert {Path(urlsplit(url).path).name for url in seen} >= {
        "xterm.css", "textual.js", "RobotoMono-VariableFont_wght.ttf", "RobotoMono-Italic-VariableFont_wght.ttf"}


def test_the_page_template_given_to_textual_serve_is_its_own_without_the_font_cdn(fake_server, gguf_files):
    assert serve_mod.serve(["--model", "m.gguf", "--port", str(_free_port())]) == 0
    # the folder lives while the server runs, and is removed when it stops
    assert not fake_server[0].templates_path.exists()
    with serve_mod.offline_templates() as folder:
        page = (folder / "app_index.html").read_text()
    assert "fonts.googleapis.com" not in page
    assert page.count("@font-face") == 2 and 'css/xterm.css" />' in page


# ---------------------------------------------------------------- serve --api


@pytest.fixture(scope="module")
def tiny_chatml(tmp_path_factory) -> Path:
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("serve-api") / "tiny.gguf", chat_template=HERMES_CHATML,
                                 special_tokens=CHATML_TOKENS, eot_token="<|im_end|>")


@pytest.mark.model
def test_with_api_this_process_serves_the_endpoint_and_each_tab_watches_its_engine(
        fake_server, capsys, tmp_path, monkeypatch, tiny_chatml):
    # The endpoint's conversations in the test's folder, not the user's; no states stored
    # (--no-checkpoints): the cache folder holds the llama.cpp build and stays.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv(ENDPOINT_KEY_ENV, raising=False)
    web, api = _free_port(), _free_port()
    trace = tmp_path / "engine.jsonl"
    seen = {}

    def while_serving() -> None:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{api}/v1", api_key="s3cret", max_retries=0, timeout=60)
        reply = client.chat.completions.create(model="any", messages=[{"role": "user", "content": "Hi"}],
                                               max_tokens=2, temperature=0)
        seen["finish"] = reply.choices[0].finish_reason
        seen["trace"] = read_trace(trace)
        seen["key"] = os.environ.get(ENDPOINT_KEY_ENV)

    FakeServer.while_serving = staticmethod(while_serving)
    argv = ["--port", str(web), "--api", str(api), "--api-key", "s3cret", "--model", str(tiny_chatml),
            "--n-ctx", "512", "--no-checkpoints", "--record", str(trace)]
    assert serve_mod.serve(argv) == 0
    (server,) = fake_server
    assert server.command == (f"EFFCTX_SERVED=1 exec {sys.executable} -m effctx_tui.main --watch {trace} "
                              f"--endpoint http://127.0.0.1:{api}/v1")
    assert seen["finish"] in ("stop", "length") and seen["key"] == "s3cret"
    assert [e.kind for e in seen["trace"].events][:1] == ["session_opened"]
    assert list((tmp_path / "data" / "effctx" / "api").glob("conversations-*.json"))  # kept in the test's folder
    assert "request_served" in {e.kind for e in seen["trace"].events}
    out = capsys.readouterr().out
    assert f"effctx serve: the endpoint is ready on http://127.0.0.1:{api}/v1" in out
    with pytest.raises(OSError):  # the endpoint stopped with the server
        socket.create_connection(("127.0.0.1", api), timeout=2).close()


@pytest.mark.parametrize(("extra", "error"), [
    (["--prefix-file", "notes.txt"], "--prefix-file is a console's own: with --api the browser consoles watch "
                                     "the endpoint's engine"),
    (["--session", "mine"], "--session is a console's own: with --api the browser consoles watch the endpoint's engine"),
    (["--record", "old.jsonl"], "old.jsonl exists: with --api the trace must be a new file, followed as it is "
                                "written"),
    (["--api", "0.0.0.0:9"], "--api 0.0.0.0:9 is reachable from other machines: give --api-key too"),
])
def test_with_api_what_a_tab_cannot_share_is_refused_before_the_model_loads(fake_server, capsys, gguf_files, extra,
                                                                              error):
    (gguf_files / "notes.txt").write_text("Notes.", encoding="utf-8")
    (gguf_files / "old.jsonl").write_bytes(DEMO_TRACE.read_bytes())  # an earlier recording
    argv = ["--port", str(_free_port()), "--model", "m.gguf", "--api", str(_free_port()), *extra]
    assert serve_mod.serve(argv) == 2
    assert not fake_server and capsys.readouterr().err == f"effctx: error: {error}\n"


def test_with_api_on_the_consoles_port_is_refused(fake_server, capsys, gguf_files):
    port = _free_port()
    assert serve_mod.serve(["--port", str(port), "--model", "m.gguf", "--api", str(port)]) == 2
    assert capsys.readouterr().err == (f"effctx: error: --api {port} is --port too: the endpoint and the browser "
                                       "consoles need a port each\n")


@pytest.mark.model
async def test_a_browser_tab_of_serve_api_watches_the_endpoint_and_sends_its_turns_to_it(tmp_path, tiny_chatml,
                                                                                         monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the endpoint's conversations, as above
    api = _free_port()
    async with _served_page(tmp_path, "--api", str(api), "--model", str(tiny_chatml), "--n-ctx", "512",
                            "--no-checkpoints") as (_, page, _port):
        terminal = "window.__terminalText.replace(/\\x1b(\\[[0-9;?$]*[A-Za-z]|\\][^\\x07]*\\x07)/g, '')"
        await page.wait_for(f"{terminal}.includes('watching engine.jsonl')", timeout=60)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{api}/v1", api_key="unused", max_retries=0, timeout=60)
        await asyncio.get_running_loop().run_in_executor(None, lambda: client.chat.completions.create(
            model="any", messages=[{"role": "user", "content": "From the SDK"}], max_tokens=2))
        await page.wait_for(f"{terminal}.includes('request: From the SDK')", timeout=30)
        # The tab's prompt has the focus: what is typed there goes to the endpoint.
        await page.evaluate("document.querySelector('.xterm-helper-textarea').focus()")
        await page.call("Input.insertText", text="typed in the tab")
        await page.call("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter",
                        windowsVirtualKeyCode=13, text="\r")
        # A turn of the tab's own conversation, in the engine the serve process runs: its
        # node is in the conversations that process keeps, and the tab shows the turn.
        kept = tmp_path / "data" / "effctx" / "api"
        deadline = time.monotonic() + 30
        while not any(node.turn is not None and node.turn.input == "typed in the tab"
                      for path in kept.glob("conversations-*.json") for node in read_tree_file(path)):
            assert time.monotonic() < deadline, "the tab's turn did not reach the engine"
            await asyncio.sleep(0.2)
        await page.wait_for(f"{terminal}.includes('typed in the tab')", timeout=30)
