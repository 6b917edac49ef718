"""Runtime identity: everything that decides what a KV state means.

Two states are only ever mixed (restored, reused, cached) when their identities are equal.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class RuntimeIdentity:
    backend: str
    backend_version: str
    model_sha256: str
    kv_cache_type_k: str
    kv_cache_type_v: str
    # Flash attention changes the numbers written into the cache (measured
    # max|dlogit| about 1 against the non-FA path), so it is part of the identity.
    flash_attn: bool
    # Kernels differ by batch size, and so do the numbers they write into the cache.
    n_batch: int
    # A policy that evicts and shifts leaves a cache that only means something to it.
    residency: str
    chat_format: str
    add_bos: bool

    def digest(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def differences(self, other: "RuntimeIdentity") -> list[tuple[str, object, object]]:
        return [
            (f.name, getattr(self, f.name), getattr(other, f.name))
            for f in fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        ]

    def to_dict(self) -> dict:
        return asdict(self)
