"""llama.cpp's context settings, shared by the llama and the llama-server cells: the K/V
cache types it takes (and which need flash attention), the options both cells' tables
hold, and the settings that change what the cache holds for a token list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from effctx_core.backends.table import options_of as table_options_of
from effctx_core.backends.table import unknown_kv_types
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


@dataclass(frozen=True)
class LlamaContextOptions:
    """The llama.cpp context settings that a llama cell and a llama-server cell share."""

    # Off by default: with it on, a restored llama.cpp state drifts from the original
    # (measured max|dlogit| about 1), so bit-exact snapshot replay needs it off.
    flash_attn: bool = False
    # The windowed layers keep every position, not only their window: a cut far back and a
    # shift stay possible, at the full cache's memory.
    swa_full: bool = True


def context_of(profile: "Profile") -> LlamaContextOptions:
    """The llama.cpp context settings of a llama or a llama-server profile."""
    return table_options_of(profile, LlamaContextOptions, profile.backend)


def kv_type_problems(profile: "Profile", context: LlamaContextOptions, where: str) -> list[str]:
    """What is wrong with the profile's K/V cache types for llama.cpp, one line each."""
    problems = unknown_kv_types(profile, KV_CACHE_TYPES, where)
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
