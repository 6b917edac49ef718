"""An RPC worker from effctx's llama.cpp build: this machine's CPU served to other
machines' llama.cpp over ggml's RPC protocol, with no binary beyond the build's libraries
(`ggml_backend_rpc_start_server` in libggml-rpc.so).

The serving call never returns and holds no Python lock, so it runs in a daemon thread;
the main thread waits for Ctrl+C or SIGTERM and then leaves, which ends the thread.
"""

from __future__ import annotations

import ctypes
import signal
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable

from effctx_core.backends.llama.rpc_endpoints import Endpoint, say_hello
from effctx_core.backends.llama_cpp_build import LlamaCppBuild
from effctx_core.errors import EffctxError, RpcWorkerError

_CPU_DEVICE = 0  # GGML_BACKEND_DEVICE_TYPE_CPU
_READY_WAIT_S = 20.0

INSECURE = ("the ggml RPC protocol has no authentication and no encryption: whoever reaches this port can "
            "load tensors into this worker, run graphs on it and read what it holds")


@dataclass(frozen=True)
class Device:
    name: str
    description: str
    free_bytes: int
    total_bytes: int


def _cpu_device(build: LlamaCppBuild) -> tuple[ctypes.CDLL, ctypes.c_void_p, Device]:
    ggml = ctypes.CDLL(str(build.ggml_library))
    ggml.ggml_backend_dev_by_type.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
    for fn in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(ggml, fn).restype = ctypes.c_char_p
        getattr(ggml, fn).argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                             ctypes.POINTER(ctypes.c_size_t)]
    dev = ggml.ggml_backend_dev_by_type(_CPU_DEVICE)
    if not dev:
        raise EffctxError("ggml found no CPU device in effctx's llama.cpp build")
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    ggml.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    device = Device(ggml.ggml_backend_dev_name(dev).decode(), ggml.ggml_backend_dev_description(dev).decode(),
                    free.value, total.value)
    return ggml, ctypes.c_void_p(dev), device


def check_port_free(where: Endpoint) -> None:
    family = socket.AF_INET6 if ":" in where.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((where.host, where.port))
        except OSError as exc:
            raise EffctxError(f"cannot serve on {where}: {exc.strerror or exc}") from None


def serve(build: LlamaCppBuild, where: Endpoint, threads: int, say: Callable[[str], None]) -> int:
    """Serve until Ctrl+C or SIGTERM; `say` gets the lines a user reads. Returns the exit code.
    The caller has checked the port (check_port_free) and warned about the protocol."""
    _ggml, dev, device = _cpu_device(build)
    rpc = ctypes.CDLL(str(build.rpc_library))
    rpc.ggml_backend_rpc_start_server.restype = None
    rpc.ggml_backend_rpc_start_server.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                                  ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
    devices = (ctypes.c_void_p * 1)(dev)
    endpoint = str(where).encode()
    thread = threading.Thread(target=rpc.ggml_backend_rpc_start_server, name="ggml-rpc-server", daemon=True,
                              args=(endpoint, None, threads, 1, devices))
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        thread.start()
        hello = _wait_ready(str(where), thread)
        say(f"serving {device.description} ({device.total_bytes >> 20} MiB) on {where} with {threads} threads, "
            f"ggml RPC protocol {hello.version_text}; Ctrl+C stops")
        say("ready")
        while not stop.wait(0.5):
            if not thread.is_alive():
                raise EffctxError(f"the RPC server on {where} stopped by itself")
        # ggml's server prints through C's stdout, which buffers a pipe: flushed first, its
        # lines do not land after this one.
        ctypes.CDLL(None).fflush(None)
        say("stopped")
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait_ready(endpoint: str, thread: threading.Thread):
    deadline = time.monotonic() + _READY_WAIT_S
    while True:
        try:
            return say_hello(endpoint, timeout=2.0)
        except RpcWorkerError:
            if not thread.is_alive():
                raise EffctxError(f"the RPC server on {endpoint} did not start") from None
            if time.monotonic() > deadline:
                raise EffctxError(f"the RPC server on {endpoint} did not answer within {_READY_WAIT_S:g} s") from None
            time.sleep(0.05)
