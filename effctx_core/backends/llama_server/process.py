"""A llama-server that effctx starts for one session: on a free loopback port, with the
profile's context settings and one slot, and stopped (SIGTERM, a bounded wait, then
SIGKILL) when the session closes, when the interpreter exits, or when this process dies."""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from effctx_core.backends.common.network import free_port
from effctx_core.backends.gguf.context import context_of
from effctx_core.backends.llama_cpp_build import LlamaCppBuild, find_build
from effctx_core.backends.llama_server.client import ServerClient, ServerError
from effctx_core.errors import BackendUnavailableError, EffctxError

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

_STOP_WAIT_S = 5.0
_POLL_S = 0.05
_PROBE_TIMEOUT_S = 2.0  # one /health probe while the server starts
_CLI_TIMEOUT_S = 10.0  # `llama-server --version` / `--help`
# llama.cpp's log lines: "0.01.279.887 W llama_kv_cache_iswa: ..." (I, W, E: the level).
_LOG_LEVEL = re.compile(r"^\s*[\d.]+\s+([IWE])\s")


# The server runs under a shell that holds the read end of a pipe whose only writer is
# this process: when this process ends, however it ends (even killed), the read sees the
# end of the pipe and the shell stops the server, which is never left running alone. The
# shell exits with the server's status.
_WATCHDOG = """exec 3<&0 </dev/null
"$@" &
server=$!
(read -r _ <&3; kill $server 2>/dev/null) &
wait $server
"""


class ServerStartError(EffctxError):
    """A llama-server that effctx started did not come up."""


@functools.lru_cache(maxsize=4)
def _cli_output(binary: str, flag: str, mtime_ns: int) -> str:
    try:
        done = subprocess.run([binary, flag], capture_output=True, text=True, timeout=_CLI_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EffctxError(f"cannot run {binary} {flag}: {exc}") from None
    return done.stdout + done.stderr


def binary_output(binary: Path, flag: str) -> str:
    """What the binary prints for `flag` (cached while the file is unchanged)."""
    return _cli_output(str(binary), flag, binary.stat().st_mtime_ns)


def binary_version(build: LlamaCppBuild) -> str:
    """`llama-server --version`'s version, with the commit from effctx's build stamp: this
    build's binary says "commit unknown" (it is built outside a git checkout)."""
    found = re.search(r"version:\s*(\S+)\s*\(build (\d+)", binary_output(build.server_binary, "--version"))
    version = f"{found.group(1)} b{found.group(2)}" if found else "unknown version"
    return f"{version} (llama.cpp {build.commit[:12]})"


def server_args(binary: Path, model_path: Path, profile: Profile, port: int, slot_dir: Path,
                slots: int = 1) -> list[str]:
    """The command line of a server for `profile`; `slots` share its n_ctx evenly."""
    args = [
        str(binary), "-m", str(model_path), "--host", "127.0.0.1", "--port", str(port),
        "-c", str(profile.n_ctx), "-np", str(slots),
        # ubatch = batch, as the llama backend's contexts: one prefill chunk is one batch.
        "-b", str(profile.n_batch), "-ub", str(profile.n_batch),
        "-t", str(profile.n_threads), "-tb", str(profile.n_threads),
        "-ctk", profile.kv_cache_type_k, "-ctv", profile.kv_cache_type_v,
        "-fa", "on" if context_of(profile).flash_attn else "off",
        "--slots", "--metrics", "--slot-save-path", str(slot_dir),
        # The slot holds what effctx sent and nothing else: no host-memory prompt cache
        # that would bring back a prompt effctx dropped, and no context shift of its own.
        "--cache-ram", "0", "--no-context-shift",
    ]
    if context_of(profile).swa_full:
        args.append("--swa-full")
    if "--no-ui" in binary_output(binary, "--help"):
        args.append("--no-ui")  # no web UI: nothing here serves a browser
    return args


def log_errors(log: Path) -> str:
    """The log's errors in one line: its first error line (the cause) and its last one
    (what the server did about it), or its last line where none says error."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    errors = [line for line in lines if (m := _LOG_LEVEL.match(line)) and m.group(1) == "E"]
    errors = errors or [line for line in lines if "error" in line.lower() or "failed" in line.lower()]
    found = [" ".join(_LOG_LEVEL.sub("", line).split()) for line in (errors or lines[-1:])]
    if not found:
        return "the log is empty"
    return found[0] if len(found) == 1 else f"{found[0]} … {found[-1]}"


@dataclass(eq=False)
class StartedServer:
    process: subprocess.Popen
    url: str
    folder: Path  # owned: the log and the slot files
    stopped: bool = False

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    @property
    def slot_dir(self) -> Path:
        return self.folder / "slots"

    def stop(self, keep_log: bool = False) -> None:
        """SIGTERM, a bounded wait, then SIGKILL; the folder goes with it unless the log
        is what explains a failure."""
        if self.stopped:
            return
        self.stopped = True
        with _running_lock:
            _running.discard(self)
        if self.process.stdin is not None:
            self.process.stdin.close()  # the watchdog's signal: it sends the server SIGTERM
        try:
            self.process.wait(timeout=_STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            pass
        # The whole group (the shell, its watchdog, the server): nothing of it outlives stop().
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=_STOP_WAIT_S)
        if keep_log:
            shutil.rmtree(self.slot_dir, ignore_errors=True)
        else:
            shutil.rmtree(self.folder, ignore_errors=True)


# Servers still running when the interpreter exits are stopped then (a session nobody closed).
_running: set[StartedServer] = set()
_running_lock = threading.Lock()


@atexit.register
def _stop_all() -> None:
    with _running_lock:
        left = list(_running)
    for server in left:
        server.stop()


def _wait_healthy(server: StartedServer, timeout_s: float) -> None:
    probe = ServerClient(server.url, _PROBE_TIMEOUT_S)
    deadline = time.monotonic() + timeout_s
    while True:
        if server.process.poll() is not None:
            raise ServerStartError(f"llama-server exited ({server.process.returncode}) before it was ready: "
                                   f"{log_errors(server.log)} (log: {server.log})")
        try:
            if probe.get("/health", "GET /health").get("status") == "ok":
                return
        except ServerError:
            pass  # not listening yet, or loading the model (503)
        if time.monotonic() > deadline:
            raise ServerStartError(f"llama-server did not come up within {timeout_s:g} s: "
                                   f"{log_errors(server.log)} (log: {server.log})")
        time.sleep(_POLL_S)


def start_server(build: LlamaCppBuild, model_path: Path, profile: Profile, timeout_s: float,
                 slots: int = 1) -> StartedServer:
    """A llama-server for `profile` on a free loopback port, once /health says it is ready."""
    folder = Path(tempfile.mkdtemp(prefix="effctx-llama-server-"))
    (folder / "slots").mkdir()
    port = free_port()
    args = server_args(build.server_binary, model_path, profile, port, folder / "slots", slots)
    with open(folder / "server.log", "wb") as log:
        # A pipe nobody reads would fill and stop the server: its output goes to a file.
        process = subprocess.Popen(["/bin/sh", "-c", _WATCHDOG, "llama-server", *args], stdin=subprocess.PIPE,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = StartedServer(process, f"http://127.0.0.1:{port}", folder)
    with _running_lock:
        _running.add(server)
    try:
        _wait_healthy(server, timeout_s)
    except BaseException:
        server.stop(keep_log=True)
        raise
    return server


@contextmanager
def user_server(model_path: Path, profile: Profile, slots: int) -> Iterator[StartedServer]:
    """A server as a user would run one for effctx to attach to: `slots` slots of the
    profile's n_ctx each, slot files in a folder of its own; stopped after the block."""
    build = find_build()
    if build is None:
        raise BackendUnavailableError("llama-server is not built here (make llama-cpp, or: effctx runtime build)")
    server = start_server(build, model_path, profile.with_changes(n_ctx=slots * profile.n_ctx), 60.0, slots)
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def contract_server(model_path: Path, profile: Profile) -> Iterator[dict[str, object]]:
    """A user's server with four slots, as the options that attach a cell to it."""
    with user_server(model_path, profile, slots=4) as server:
        yield {"server_url": server.url, "slot_dir": str(server.slot_dir)}
