"""Runtime identities for store tests that need no model."""

from __future__ import annotations

from effctx_core.identity import RuntimeIdentity

LLAMA_SETTINGS = {"kv_cache_type_k": "f16", "kv_cache_type_v": "f16", "flash_attn": False, "n_batch": 512}


def identity(**settings) -> RuntimeIdentity:
    """The llama identity of the default profile, with backend settings changed."""
    return RuntimeIdentity.build("llama", "0.3.36", "ab" * 32, {**LLAMA_SETTINGS, **settings}, "none",
                                 "plain-transcript-v1", True)
