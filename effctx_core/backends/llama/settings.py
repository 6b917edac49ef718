"""The llama backend's profile settings: its `[llama]` options (llama.cpp's context
settings, and the RPC workers it may run on), their checks, and its identity settings."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from effctx_core.backends.conformance import ContractVariant
from effctx_core.backends.gguf.context import (
    LlamaContextOptions,
    context_kv_settings,
    kv_type_problems,
)
from effctx_core.backends.llama.rpc_endpoints import parse_endpoint
from effctx_core.backends.table import options_of as table_options_of
from effctx_core.identity import Setting

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

MAX_RPC_WORKERS = 16  # GGML_RPC_MAX_SERVERS


def _rpc_workers(model_path, profile):
    from effctx_core.backends.llama.rpc_local import contract_workers

    return contract_workers()


# In this process, and with the model and cache on two RPC workers on loopback.
CONTRACT_VARIANTS = {"": ContractVariant(), "rpc": ContractVariant(services=_rpc_workers)}


@dataclass(frozen=True)
class LlamaOptions(LlamaContextOptions):
    """The `[llama]` table of a profile, with its defaults."""

    # ggml RPC workers ("host:port") that hold the model's layers and KV cache.
    rpc_workers: tuple[str, ...] = ()
    # With rpc_workers: the longest silence from a worker before the session is given up
    # as poisoned (a model upload gets this plus its size at 10 MB/s).
    rpc_timeout_s: float = 60.0
    # With swa_full and flash attention off: once the windowed layers hold half a window
    # more than their window, the next chunk of input begins by loading the session's own
    # state back, which leaves them the window; their attention then runs over that, not
    # the whole tape. A cut further back restarts from a state kept at a chunk's start.
    # Off: they keep every position.
    trim_windows: bool = True


# What an earlier effctx read at a profile's top level and now belongs in [llama].
MOVED_KEYS = ("flash_attn", "swa_full", "rpc_workers", "rpc_timeout_s")


def options_of(profile: "Profile") -> LlamaOptions:
    return table_options_of(profile, LlamaOptions, "llama")


def value_problem(key: str, value: object) -> str | None:
    if key == "rpc_timeout_s" and not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        return "must be a positive number of seconds"
    return None


def check_profile(profile: "Profile", where: str) -> list[str]:
    """What is wrong with the profile for llama.cpp, one line each (empty: nothing)."""
    options = options_of(profile)
    problems = []
    for worker in options.rpc_workers:
        try:
            parse_endpoint(worker)
        except ValueError as exc:
            problems.append(f"{where}: rpc_workers: {exc}")
    if len(set(options.rpc_workers)) != len(options.rpc_workers):
        problems.append(f"{where}: rpc_workers names a worker twice")
    if len(options.rpc_workers) > MAX_RPC_WORKERS:
        problems.append(f"{where}: rpc_workers: at most {MAX_RPC_WORKERS} workers (ggml's limit)")
    return problems + kv_type_problems(profile, options, where)


def kv_settings(profile: "Profile") -> dict[str, Setting]:
    return context_kv_settings(profile, options_of(profile))
