"""RPC workers on this machine's loopback, started and stopped together: what the
conformance suite runs the llama cell through, and a way to try rpc_workers on one box."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from effctx_core.backends.common.network import free_port
from effctx_core.backends.llama_cpp_build import find_build
from effctx_core.errors import BackendUnavailableError, EffctxError

_READY_S = 30.0


@dataclass
class LocalWorker:
    endpoint: str
    process: subprocess.Popen
    log: Path  # what the worker printed: a file, since a pipe nobody reads would fill and stop it

    @property
    def pid(self) -> int:
        return self.process.pid


def start_worker(threads: int = 1) -> LocalWorker:
    """An `effctx worker` on a free loopback port, once it has said it is ready."""
    port = free_port()
    with tempfile.NamedTemporaryFile(prefix=f"effctx-worker-{port}-", suffix=".log", delete=False) as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "effctx_core.cli.main", "worker", "--port", str(port), "--threads", str(threads)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    worker = LocalWorker(f"127.0.0.1:{port}", process, Path(log.name))
    deadline = time.monotonic() + _READY_S
    while b"effctx worker: ready" not in worker.log.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            stop_worker(worker)
            raise EffctxError(f"the RPC worker on {worker.endpoint} did not start within {_READY_S:g} s")
        time.sleep(0.05)
    return worker


def stop_worker(worker: LocalWorker) -> None:
    if worker.process.poll() is None:
        worker.process.send_signal(signal.SIGTERM)
        try:
            worker.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait(timeout=5)
    worker.log.unlink(missing_ok=True)


@contextmanager
def local_workers(count: int = 2, threads: int = 1) -> Iterator[list[LocalWorker]]:
    """`count` loopback workers for the block; BackendUnavailableError without the build."""
    if find_build() is None:
        raise BackendUnavailableError("RPC workers need effctx's llama.cpp build (make llama-cpp)")
    workers: list[LocalWorker] = []
    try:
        for _ in range(count):
            workers.append(start_worker(threads))
        yield workers
    finally:
        for worker in workers:
            stop_worker(worker)


@contextmanager
def contract_workers() -> Iterator[dict[str, object]]:
    """Two loopback workers, as the option that points a llama cell at them."""
    with local_workers(2) as workers:
        yield {"rpc_workers": tuple(w.endpoint for w in workers)}
