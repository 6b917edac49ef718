"""Runtime profiles: every setting that changes KV contents or capacity.

Issue 2 ships one built-in profile; TOML profiles and their validation build on this record.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from .contract import EffctxError

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


def default_threads() -> int:
    # llama.cpp spins its threads; more threads than free cores halves decode speed
    # (shared/notes: nt=2 with one core busy 21 tok/s vs 53).
    return max(1, len(os.sched_getaffinity(0)))


@dataclass(frozen=True)
class Profile:
    name: str = "default"
    backend: str = "llama"
    n_ctx: int = 4096
    n_batch: int = 512
    n_threads: int = 0
    kv_cache_type_k: str = "f16"
    kv_cache_type_v: str = "f16"
    # Off by default: bit-exact snapshot replay needs it off (shared/notes pitfall 7).
    flash_attn: bool = False
    swa_full: bool = True

    def __post_init__(self) -> None:
        for side in ("k", "v"):
            kind = getattr(self, f"kv_cache_type_{side}")
            if kind not in KV_CACHE_TYPES:
                known = ", ".join(KV_CACHE_TYPES)
                raise EffctxError(f"unknown KV cache type {kind!r} for {side.upper()} (known: {known})")
        if self.n_ctx < 16:
            raise EffctxError(f"n_ctx {self.n_ctx} is too small (minimum 16)")
        if self.n_batch < 1:
            raise EffctxError(f"n_batch {self.n_batch} must be positive")
        if self.kv_cache_type_v not in ("f16", "f32", "bf16") and not self.flash_attn:
            raise EffctxError(
                f"V cache type {self.kv_cache_type_v} needs flash attention "
                "(llama.cpp cannot create a context with a quantized V cache without it)"
            )

    @property
    def threads(self) -> int:
        return self.n_threads or default_threads()

    def with_changes(self, **changes) -> "Profile":
        return replace(self, **changes)


DEFAULT_PROFILE = Profile()
