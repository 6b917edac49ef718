"""Runtime identities for store tests that need no model."""

from __future__ import annotations

from effctx_core.identity import RuntimeIdentity


def identity(**changes) -> RuntimeIdentity:
    base = dict(backend="llama", backend_version="0.3.36", model_sha256="ab" * 32, kv_cache_type_k="f16",
                kv_cache_type_v="f16", flash_attn=False, n_batch=512, residency="none", chat_format="gemma",
                add_bos=True)
    return RuntimeIdentity(**{**base, **changes})
