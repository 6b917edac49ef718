"""The llama backend's profile settings: which K/V cache types llama.cpp takes, which need
flash attention, and which settings change what the cache holds for a token list."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from effctx_core.backends.conformance import ContractVariant
from effctx_core.backends.llama.rpc_endpoints import parse_endpoint
from effctx_core.backends.table import options_of as table_options_of
from effctx_core.identity import Setting

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

# ggml type ids of the cache element types llama.cpp accepts for K and V.
KV_CACHE_TYPES: dict[str, int] = {
    "f32": 0,
    "f16": 1,
    "q4_0": 2,
    "q4_1": 3,
    "q5_0": 6,
    "q5_1": 7,
    "q8_0": 8,
    "iq4_nl": 20,
    "bf16": 30,
}

# Without flash attention llama.cpp refuses to create a context with any other V type.
PLAIN_V_TYPES = ("f32", "f16", "bf16")
QUANTIZED_TYPES = tuple(t for t in KV_CACHE_TYPES if t not in PLAIN_V_TYPES)
MAX_RPC_WORKERS = 16  # GGML_RPC_MAX_SERVERS


def _rpc_workers(model_path, profile):
    from effctx_core.backends.llama.rpc_local import contract_workers

    return contract_workers()


# In this process, and with the model and cache on two RPC workers on loopback.
CONTRACT_VARIANTS = {"": ContractVariant(), "rpc": ContractVariant(services=_rpc_workers)}


@dataclass(frozen=True)
class LlamaContextOptions:
    """The llama.cpp context settings that a llama cell and a llama-server cell share."""

    # Off by default: with it on, a restored llama.cpp state drifts from the original
    # (measured max|dlogit| about 1), so bit-exact snapshot replay needs it off.
    flash_attn: bool = False
    # The windowed layers keep every position, not only their window: a cut far back and a
    # shift stay possible, at the full cache's memory.
    swa_full: bool = True


@dataclass(frozen=True)
class LlamaOptions(LlamaContextOptions):
    """The `[llama]` table of a profile, with its defaults."""

    # ggml RPC workers ("host:port") that hold the model's layers and KV cache.
    rpc_workers: tuple[str, ...] = ()
    # With rpc_workers: the longest silence from a worker before the session is given up
    # as poisoned (a model upload gets this plus its size at 10 MB/s).
    rpc_timeout_s: float = 60.0


# What an earlier effctx read at a profile's top level and now belongs in [llama].
MOVED_KEYS = tuple(f.name for f in fields(LlamaOptions))


def options_of(profile: "Profile") -> LlamaOptions:
    return table_options_of(profile, LlamaOptions, "llama")


def context_of(profile: "Profile") -> LlamaContextOptions:
    """The llama.cpp context settings of a llama or a llama-server profile."""
    return table_options_of(profile, LlamaContextOptions, profile.backend)


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


def kv_type_problems(profile: "Profile", context: LlamaContextOptions, where: str) -> list[str]:
    """What is wrong with the profile's K/V cache types for llama.cpp, one line each."""
    problems = []
    for side in ("k", "v"):
        kind = getattr(profile, f"kv_cache_type_{side}")
        if kind not in KV_CACHE_TYPES:
            problems.append(f"{where}: unknown KV cache type {kind!r} for {side.upper()} "
                            f"(known: {', '.join(KV_CACHE_TYPES)})")
    if profile.kv_cache_type_v in KV_CACHE_TYPES and profile.kv_cache_type_v not in PLAIN_V_TYPES \
            and not context.flash_attn:
        problems.append(f"{where}: V cache type {profile.kv_cache_type_v} needs flash_attn = true "
                        "(llama.cpp cannot create a context with a quantized V cache without it)")
    return problems


def context_kv_settings(profile: "Profile", context: LlamaContextOptions) -> dict[str, Setting]:
    """The llama.cpp settings that change the numbers written into the cache, for the identity."""
    return {
        "kv_cache_type_k": profile.kv_cache_type_k,
        "kv_cache_type_v": profile.kv_cache_type_v,
        # Flash attention changes the numbers written into the cache (measured max|dlogit|
        # about 1 against the non-FA path).
        "flash_attn": context.flash_attn,
        # llama.cpp's kernels give other numbers for other batch sizes (measured
        # max|dlogit| 1.1 between a 1- and a 14-token batch).
        "n_batch": profile.n_batch,
    }


def kv_settings(profile: "Profile") -> dict[str, Setting]:
    return context_kv_settings(profile, options_of(profile))
