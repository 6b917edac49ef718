"""Llama sessions whose model and cache live on RPC workers, run in an RPC host process
(rpc_host.py) and driven from here through a pipe, with every wait bounded.

One host per set of workers serves every session of this process: a worker serves one
client connection at a time, so a second host would wait for the first to let go. The
host ends when its last session closes, which hands the workers back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator, Sequence

from effctx_core.backends.llama.rpc_endpoints import say_hello
from effctx_core.backends.llama.rpc_host import GENERATOR, PROGRESS
from effctx_core.backends.llama.settings import options_of
from effctx_core.backends.llama_cpp_build import LlamaCppBuild
from effctx_core.contract import (
    BaselineRun,
    ContextReport,
    DecodeConfig,
    ModelInfo,
    ProgressSink,
    ScoredSuffix,
    SessionSnapshot,
    SuffixStatus,
    TokenChunk,
)
from effctx_core.errors import EffctxError, RpcWorkerError

if TYPE_CHECKING:
    from effctx_core.contract import PrefixStatus
    from effctx_core.profiles import Profile

# What a user reads a failed call as.
_WHAT = {"__next__": "decode", "__getattribute__": "reading the session's tape", "open_session": "loading the model"}
_POLL_S = 0.1
_PROBE_S = 2.0  # a worker that does not say HELLO back within this is not answering
# A model upload is bounded by the stall timeout plus its size at this many bytes a
# second: slower than any link a worker is worth using over.
_UPLOAD_BYTES_PER_S = 10e6


class RpcHost:
    """The host process for one set of workers, and the one pipe to it."""

    def __init__(self, workers: tuple[str, ...], timeout_s: float, build: LlamaCppBuild):
        self.workers = workers
        self.timeout_s = timeout_s
        for worker in workers:  # one line for a worker that is down or speaks another version
            say_hello(worker, timeout=min(timeout_s, 5.0))
        self._lock = threading.RLock()
        self.users = 0
        self.failure: RpcWorkerError | None = None
        to_host, self._to_host = os.pipe()
        self._from_host, from_host = os.pipe()
        log = tempfile.NamedTemporaryFile(prefix="effctx-rpc-host-", suffix=".log", delete=False)
        self.log_path = Path(log.name)
        env = {**os.environ, "LLAMA_CPP_LIB_PATH": str(build.bin_dir)}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "effctx_core.backends.llama.rpc_host", str(to_host), str(from_host)],
            pass_fds=(to_host, from_host), stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
            start_new_session=True,
        )
        log.close()
        os.close(to_host)
        os.close(from_host)
        self._out = Connection(self._to_host, readable=False)
        self._in = Connection(self._from_host, writable=False)
        self.devices: dict[str, str] = self._exchange(("init", list(workers)), None, "registering the workers",
                                                      timeout_s)

    @property
    def pid(self) -> int:
        return self._proc.pid

    # ------------------------------------------------------------------ calls

    def call(self, handle: int, method: str, *args: Any, progress: ProgressSink | None = None,
             bound_s: float | None = None, **kwargs: Any) -> Any:
        """One request to the host; `bound_s`: the longest silence allowed (default: the
        profile's rpc_timeout_s), progress messages reset it."""
        if progress is not None:
            kwargs["progress"] = PROGRESS
        what = _WHAT.get(method, method.replace("_", " "))
        return self._exchange(("call", handle, method, args, kwargs), progress, what, bound_s or self.timeout_s)

    def _exchange(self, request: tuple, progress: ProgressSink | None, what: str, bound_s: float) -> Any:
        with self._lock:
            if self.failure is not None:
                raise self.failure
            # What the progress sink raised: the host stops the prefill there, and the
            # caller gets this very exception back, not a copy through the pipe.
            stopped: BaseException | None = None
            try:
                self._out.send(request)
                while True:
                    message = self._receive(what, bound_s)
                    kind = message[0]
                    if kind == "progress":
                        assert progress is not None
                        try:
                            progress(message[1])
                        except BaseException as exc:  # noqa: BLE001 - handed back to the caller below
                            stopped = exc
                            self._out.send(("raise",))
                        else:
                            self._out.send(("go",))
                        continue
                    if kind == "result":
                        return message[1]
                    if kind == "stop":
                        raise StopIteration
                    raise stopped if stopped is not None else message[1]
            except (OSError, EOFError):
                raise self._fail(what) from None
            except (KeyboardInterrupt, SystemExit):
                # Interrupted between a request and its answer: the pipe is out of step.
                self._stop()
                self.failure = RpcWorkerError(f"interrupted during {what}: the RPC host was stopped")
                raise

    def _receive(self, what: str, bound_s: float) -> tuple:
        deadline = time.monotonic() + bound_s
        while not self._in.poll(_POLL_S):
            if self._proc.poll() is not None:
                raise self._fail(what)
            if time.monotonic() > deadline:
                raise self._fail(what, stalled_s=bound_s)
        try:
            message: tuple = self._in.recv()
        except (OSError, EOFError):
            raise
        except Exception as exc:  # an answer this process cannot unpickle: the pipe is still in step
            return ("error", EffctxError(f"{what}: the RPC host's answer cannot be read here ({exc})"))
        return message

    def _fail(self, what: str, stalled_s: float | None = None) -> RpcWorkerError:
        """Stop the host, find out which worker failed, and poison every session of it."""
        code = self._proc.poll()
        self._stop()
        for worker in self.workers:
            try:
                say_hello(worker, timeout=_PROBE_S)
            except RpcWorkerError as exc:
                self.failure = RpcWorkerError(f"{what} failed: {exc}; the session is poisoned (reopen it once the "
                                              "worker is back)", worker)
                return self.failure
        if stalled_s is not None:
            reason = f"no answer within {stalled_s:g} s (rpc_timeout_s), though every worker answers HELLO now"
        else:
            reason = f"the RPC host ended ({_ended(code)}): {self._last_log_line()}"
        self.failure = RpcWorkerError(f"{what} failed: {reason}; the session is poisoned (log: {self.log_path})")
        return self.failure

    def _last_log_line(self) -> str:
        try:
            lines = [line.strip() for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return "no log"
        errors = [line for line in lines if "error" in line.lower() or "abort" in line.lower() or "failed" in line]
        return (errors or lines or ["no log"])[-1]

    def _stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
        self._proc.wait(timeout=10)
        for conn in (self._out, self._in):
            conn.close()

    def release(self) -> None:
        """A session let go; the last one ends the host and frees the workers."""
        with self._lock:
            self.users -= 1
            if self.users > 0 or self.failure is not None:
                return
            try:
                self._exchange(("exit",), None, "closing the RPC host", _PROBE_S)
                self._proc.wait(timeout=_PROBE_S)
            except (EffctxError, subprocess.TimeoutExpired):
                pass
            if self._proc.poll() is None or not self._out.closed:
                self._stop()
            self.failure = RpcWorkerError("the RPC host was closed")
            self.log_path.unlink(missing_ok=True)


def _ended(code: int | None) -> str:
    if code is None:
        return "stopped by effctx"
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


_hosts: dict[tuple[str, ...], RpcHost] = {}
_hosts_lock = threading.Lock()


def host_for(profile: Profile, build: LlamaCppBuild) -> RpcHost:
    """The live host of these workers, or a new one; the caller holds one use of it."""
    with _hosts_lock:
        workers, timeout_s = options_of(profile).rpc_workers, options_of(profile).rpc_timeout_s
        host = _hosts.get(workers)
        if host is None or host.failure is not None:
            host = RpcHost(workers, timeout_s, build)
            _hosts[workers] = host
        host.users += 1
        return host


def load_bound(profile: Profile, model_path: Path) -> float:
    return options_of(profile).rpc_timeout_s + Path(model_path).stat().st_size / _UPLOAD_BYTES_PER_S


class _HostObject:
    """An object the RPC host made (a session, a baseline), called by its handle; it holds
    one use of the host, which closing it gives back."""

    def __init__(self, host: RpcHost, model_path: Path, profile: Profile, method: str, *args: Any):
        """`method` of the host loads the model and makes the object: it answers the
        handle and whatever else the object is described by (`self._made`)."""
        self._host = host
        try:
            self._handle, *self._made = host.call(0, method, str(model_path), profile, *args,
                                                  bound_s=load_bound(profile, model_path))
        except BaseException:
            host.release()
            raise
        self._closed = False

    @property
    def host(self) -> RpcHost:
        return self._host

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._host.call(self._handle, method, *args, **kwargs)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._host.failure is None:
                self._call("close")
        finally:
            self._host.release()


class HostedSession(_HostObject):
    """A llama session in the RPC host: the contract's calls, each one bounded."""

    def __init__(self, host: RpcHost, model_path: Path, profile: Profile, backend_version: str):
        super().__init__(host, model_path, profile, "open_session", backend_version)
        self._info: ModelInfo = self._made[0]
        self._last_report: ContextReport | None = None

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def tokens(self) -> tuple[int, ...]:
        tokens: tuple[int, ...] = self._host.call(self._handle, "__getattribute__", "tokens")
        return tokens

    def tokenize(self, text: str, add_bos: bool, special: bool = False) -> list[int]:
        tokens: list[int] = self._call("tokenize", text, add_bos, special)
        return tokens

    def detokenize(self, tokens: Sequence[int]) -> str:
        text: str = self._call("detokenize", list(tokens))
        return text

    def ensure_prefix(self, prefix: Sequence[int], progress: ProgressSink | None = None) -> PrefixStatus:
        status: PrefixStatus = self._call("ensure_prefix", list(prefix), progress=progress)
        return status

    def prefill_suffix(self, suffix: Sequence[int], progress: ProgressSink | None = None) -> SuffixStatus:
        status: SuffixStatus = self._call("prefill_suffix", list(suffix), progress=progress)
        return status

    def score_suffix(self, suffix: Sequence[int], progress: ProgressSink | None = None) -> ScoredSuffix:
        scored: ScoredSuffix = self._call("score_suffix", list(suffix), progress=progress)
        return scored

    def decode(self, config: DecodeConfig) -> Generator[TokenChunk, None, None]:
        marker, handle = self._call("decode", config)
        assert marker == GENERATOR
        done = False
        try:
            while True:
                try:
                    chunk: TokenChunk = self._host.call(handle, "__next__")
                except StopIteration:
                    done = True
                    return
                yield chunk
        finally:
            if not done and self._host.failure is None:
                self._host.call(handle, "close")  # the last token handed out stays pending

    def snapshot(self) -> SessionSnapshot:
        snap: SessionSnapshot = self._call("snapshot")
        return snap

    def restore(self, snapshot: SessionSnapshot) -> None:
        self._call("restore", snapshot)

    def remove_range(self, start: int, end: int) -> float:
        ms: float = self._call("remove_range", start, end)
        return ms

    def explain(self) -> ContextReport:
        if self._host.failure is not None:
            # The cache went with the host's connections: nothing is resident anywhere.
            last = self._last_report
            return ContextReport(
                resident_tokens=0, pending_tokens=0, available_tokens=0, n_ctx=self._info.n_ctx,
                prefill_calls=last.prefill_calls if last else 0, prefill_tokens=last.prefill_tokens if last else 0,
                prefill_ms=last.prefill_ms if last else 0.0, decode_calls=last.decode_calls if last else 0,
                decode_tokens=last.decode_tokens if last else 0, decode_ms=last.decode_ms if last else 0.0,
                poisoned=True, rollback_floor=0)
        report: ContextReport = self._call("explain")
        self._last_report = report
        return report


class HostedBaseline(_HostObject):
    """The llama baseline, run in the RPC host on the same workers."""

    def __init__(self, host: RpcHost, model_path: Path, profile: Profile):
        super().__init__(host, model_path, profile, "baseline")
        self.name: str = self._made[0]
        self.library_name: str = self._made[1]

    def raw(self, prompt: Sequence[int], decode_tokens: int) -> BaselineRun:
        run: BaselineRun = self._call("raw", list(prompt), decode_tokens)
        return run

    def library(self, prompt: Sequence[int], decode_tokens: int) -> BaselineRun:
        run: BaselineRun = self._call("library", list(prompt), decode_tokens)
        return run

    def control(self, prompt: Sequence[int], decode_tokens: int, stop: tuple[str, ...]) -> BaselineRun:
        run: BaselineRun = self._call("control", list(prompt), decode_tokens, stop)
        return run

    def forget(self) -> None:
        self._call("forget")
