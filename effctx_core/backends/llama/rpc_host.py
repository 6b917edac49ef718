"""The RPC host: a process of its own that loads effctx's RPC-enabled llama.cpp build,
registers the workers, and runs llama sessions for the process that started it.

Why a process: llama.cpp's RPC client aborts its whole process when a worker dies, and
waits forever on one that stops answering. Here that ends only this process; the parent
sees it, bounds every wait, and names the worker. It also keeps the workers out of the
parent's ggml backend registry, where local cells go on running on this CPU (the same
build's libraries: binding.py).

Started as `python -m effctx_core.backends.llama.rpc_host READ_FD WRITE_FD` with
LLAMA_CPP_LIB_PATH set to the parent's build, which binding.py then loads. Requests
arrive as pickled tuples; each gets exactly one answer, preceded by any number of
progress messages.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import sys
import time
import traceback
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable

from effctx_core.backends.llama.rpc_placement import Placement, parse_placement
from effctx_core.backends.llama.settings import options_of
from effctx_core.contract import ModelInfo, PrefillProgress, StateCosts
from effctx_core.errors import Cancelled, EffctxError
from effctx_core.parent_watch import watch_parent
from effctx_core.units import ms_between

_COST_TOKENS = 128
# More layers than any model has: llama.cpp offloads every layer and the output head.
ALL_LAYERS = 999
# Markers that cross the pipe in place of objects that cannot.
PROGRESS = "<progress sink>"
GENERATOR = "<generator>"


def _ggml(lib_dir: Path) -> ctypes.CDLL:
    # libggml.so.0 is the file libllama.so links. libggml.so would be loaded as a second
    # copy with a registry of its own: the workers would be registered there and the
    # model would silently run on this CPU.
    ggml = ctypes.CDLL(str(lib_dir / "libggml.so.0"))
    ggml.ggml_backend_reg_by_name.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    ggml.ggml_backend_register.argtypes = [ctypes.c_void_p]
    ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_dev_get.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    for fn in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(ggml, fn).restype = ctypes.c_char_p
        getattr(ggml, fn).argtypes = [ctypes.c_void_p]
    return ggml


def register_workers(lib_dir: Path, workers: list[str]) -> dict[str, str]:
    """Register each worker with ggml's backend registry before any model loads (llama.cpp's
    own `--rpc` does the same); returns ggml's device name -> endpoint."""
    ggml = _ggml(lib_dir)
    reg = ggml.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise EffctxError(f"the llama.cpp libraries in {lib_dir} have no RPC backend")
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(
        ggml.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server"))
    for endpoint in workers:
        ggml.ggml_backend_register(add_server(endpoint.encode()))
    devices = {}
    for i in range(ggml.ggml_backend_dev_count()):
        dev = ggml.ggml_backend_dev_get(i)
        name = ggml.ggml_backend_dev_name(dev).decode()
        if name.startswith("RPC"):
            devices[name] = ggml.ggml_backend_dev_description(dev).decode()
    return devices


def check_placement(placement: Placement, n_layers: int) -> None:
    """Refuse a model that did not land on the workers: a wrong library copy or a worker
    llama.cpp skipped would otherwise run everything here, silently."""
    if placement.local_layers:
        local = placement.local_layers
        raise EffctxError(f"the model did not land on the RPC workers: llama.cpp kept {len(local)} of {n_layers} "
                          f"layers on this machine's CPU (layers {local[0]}-{local[-1]})")
    idle = [w.where for w in placement.workers if not w.layers and not w.output_head]
    if idle:
        raise EffctxError(f"llama.cpp put no layer on RPC worker {', '.join(idle)} "
                          f"({n_layers} layers over {len(placement.workers)} workers)")


class Host:
    """The objects this process holds for its parent, by handle."""

    def __init__(self, workers: list[str]):
        from effctx_core.backends.gguf.binding import BUILD, llama_cpp

        if not llama_cpp.llama_supports_rpc():
            raise EffctxError(f"the llama.cpp libraries loaded from {BUILD.bin_dir} were built without RPC")
        self.devices = register_workers(BUILD.bin_dir, workers)
        self.objects: dict[int, Any] = {}
        self._next = 1
        self._load_lines: dict[str, list[str]] = {}
        self._costs: dict[tuple, StateCosts] = {}

    def _keep(self, obj: object) -> int:
        handle = self._next
        self._next += 1
        self.objects[handle] = obj
        return handle

    def _load(self, model_path: str):
        """The model, loaded once for this process with every layer on the workers, and
        the log lines of that load: only the first load says where the layers went."""
        from effctx_core.backends.gguf.runtime import all_log_lines, load_model

        with all_log_lines() as lines:
            # Every layer: the workers hold the blocks, the KV cache and the output head.
            model = load_model(Path(model_path), gpu_layers=ALL_LAYERS)
        return model, self._load_lines.setdefault(str(model.path), lines)

    def open_session(self, model_path: str, profile, backend_version: str) -> tuple[int, ModelInfo]:
        from effctx_core.backends.gguf.runtime import all_log_lines
        from effctx_core.backends.llama.session import LlamaSession

        model, load_lines = self._load(model_path)
        with all_log_lines() as lines:
            session = LlamaSession(model, profile, backend_version)
        placement = parse_placement(load_lines + lines, self.devices, model.facts.n_layers)
        check_placement(placement, model.facts.n_layers)
        options = options_of(profile)
        key = (str(model.path), profile.kv_cache_type_k, profile.kv_cache_type_v, options.flash_attn, options.swa_full)
        if key not in self._costs:
            self._costs[key] = measure_state_costs(model, profile, backend_version)
        info = session.place(placement.summary, placement.workers, self._costs[key])
        return self._keep(session), info

    def baseline(self, model_path: str, profile) -> tuple[int, str, str]:
        from effctx_core.backends.llama.baseline import LlamaBaseline

        self._load(model_path)
        baseline = LlamaBaseline(Path(model_path), profile, gpu_layers=ALL_LAYERS)
        return self._keep(baseline), baseline.name, baseline.library_name

    def drop(self, handle: int) -> None:
        self.objects.pop(handle, None)


def measure_state_costs(model, profile, backend_version: str) -> StateCosts:
    """Prefill, save and restore a short state on a throwaway context of the same cache
    settings: the figures the prefix cache weighs a restore against a prefill with."""
    from effctx_core.backends.llama.session import LlamaSession

    n_ctx = min(2 * _COST_TOKENS, model.n_ctx_train)
    probe = profile.with_changes(n_ctx=n_ctx, residency=replace(profile.residency, budget=0))
    session = LlamaSession(model, probe, backend_version)
    try:
        text = " ".join(["the quick brown fox jumps over the lazy dog"] * 16)
        tokens = model.tokenize(text, True)[: min(_COST_TOKENS, n_ctx - 1)]
        t0 = time.perf_counter_ns()
        session.ensure_prefix(tokens)
        t1 = time.perf_counter_ns()
        snapshot = session.snapshot()
        t2 = time.perf_counter_ns()
        session.ensure_prefix([])
        t3 = time.perf_counter_ns()
        session.restore(snapshot)
        t4 = time.perf_counter_ns()
    finally:
        session.close()
    return StateCosts(len(tokens), ms_between(t0, t1), ms_between(t1, t2), ms_between(t3, t4))


def _answer(out: Connection, message: tuple) -> None:
    try:
        out.send(message)
    except (pickle.PicklingError, TypeError, AttributeError):
        # An error whose pickle fails still reaches the parent as its one line.
        kind, value = message[0], message[1] if len(message) > 1 else None
        if kind != "error":
            raise
        out.send(("error", EffctxError(f"{type(value).__name__}: {value}")))


def _progress_sink(inbox: Connection, out: Connection) -> Callable[[PrefillProgress], None]:
    def report(progress: PrefillProgress) -> None:
        out.send(("progress", progress))
        if inbox.recv()[0] == "raise":
            raise Cancelled("stopped by the caller's progress sink")

    return report


def serve(inbox: Connection, out: Connection) -> None:
    host: Host | None = None
    while True:
        try:
            request = inbox.recv()
        except EOFError:
            return  # the parent is gone
        kind = request[0]
        try:
            if kind == "init":
                host = Host(request[1])
                result: Any = host.devices
            elif kind == "exit":
                out.send(("result", None))
                return
            else:
                assert host is not None
                _, handle, method, args, kwargs = request
                target: Any = host if handle == 0 else host.objects[handle]
                if kwargs.get("progress") == PROGRESS:
                    kwargs["progress"] = _progress_sink(inbox, out)
                if method == "__next__":
                    try:
                        result = next(target)
                    except StopIteration:
                        out.send(("stop",))
                        continue
                else:
                    result = getattr(target, method)(*args, **kwargs)
                if method == "decode":
                    result = (GENERATOR, host._keep(result))
                elif method == "close" and handle != 0:
                    host.drop(handle)
            _answer(out, ("result", result))
        except BaseException as exc:  # noqa: BLE001 - every failure is the parent's to raise
            if not isinstance(exc, (EffctxError, KeyboardInterrupt)):
                traceback.print_exc(file=sys.stderr)
            _answer(out, ("error", exc))


def main(argv: list[str]) -> None:
    # Ctrl+C in a terminal reaches the whole process group: the parent decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # End with the parent, even while llama.cpp waits on a worker.
    watch_parent(lambda: os._exit(1))
    inbox = Connection(int(argv[1]), writable=False)
    out = Connection(int(argv[2]), readable=False)
    serve(inbox, out)


if __name__ == "__main__":
    main(sys.argv)
