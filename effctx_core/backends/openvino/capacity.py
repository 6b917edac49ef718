"""The size of openvino-genai's paged cache, per 32-token block, for each element type the
CPU plugin takes, from the model's shape.

A u8 block carries zero points and scales: K by channel (an f32 pair per head dimension
per block), V by token (an f32 pair per token). That gives the measured 336,384 bytes per
block on Gemma 3 (f16: 589,824); tests check it against the pipeline's own
kv_cache_size_in_bytes. The u4 layout has more metadata than that (measured 377,856 bytes
on Gemma 3, above u8) and is not modeled: its figures are left out, not guessed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from effctx_core.backends.openvino.settings import BLOCK_TOKENS, KV_CACHE_TYPES
from effctx_core.contract import CapacityReport, ModelInfo
from effctx_core.contract.records import capacity_rows
from effctx_core.units import format_bytes

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

_ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "u8": 1}
_PAIR = 8  # an f32 scale and an f32 zero point


def _block_bytes(kind: str, head_dim: int, by_channel: bool) -> int | None:
    if kind not in _ELEMENT_BYTES:
        return None
    data = BLOCK_TOKENS * head_dim * _ELEMENT_BYTES[kind]
    if kind != "u8":
        return data
    return data + _PAIR * (head_dim if by_channel else BLOCK_TOKENS)


def block_bytes(info: ModelInfo, kind_k: str, kind_v: str) -> int | None:
    """Bytes of one 32-token block over every layer, K and V; None where not modeled."""
    facts = info.facts
    k = _block_bytes(kind_k, facts.head_dim_k, by_channel=True)
    v = _block_bytes(kind_v, facts.head_dim_v, by_channel=False)
    if k is None or v is None:
        return None
    return facts.n_layers * facts.n_head_kv * (k + v)


def capacity_report(info: ModelInfo, profile: Profile, memory_bytes: int) -> CapacityReport:
    facts = info.facts
    rows: list[dict] = []
    for kind_k in KV_CACHE_TYPES:
        for kind_v in KV_CACHE_TYPES:
            per_block = block_bytes(info, kind_k, kind_v)
            rows.append({
                "kv_cache_type_k": kind_k, "kv_cache_type_v": kind_v, "bytes_per_block": per_block,
                "tokens": None if per_block is None else memory_bytes // per_block * BLOCK_TOKENS,
                "needs_flash_attn": False, "modeled": per_block is not None,
            })
    own = block_bytes(info, profile.kv_cache_type_k, profile.kv_cache_type_v)
    text = [f"KV cache     {profile.kv_cache_type_k}/{profile.kv_cache_type_v}: "
            + (f"{own:,} B per {BLOCK_TOKENS}-token block over {facts.n_layers} layers (paged layout; every layer "
               "keeps every position)" if own else "u4 block size not modeled (openvino-genai reports it when it runs)"),
            f"capacity for {format_bytes(memory_bytes)}: every K/V pair is in --json",
            f"  {'K/V':14}{'B/block':>10}{'tokens':>10}"]
    text += [f"  {r['kv_cache_type_k'] + '/' + r['kv_cache_type_v']:14}{r['bytes_per_block'] or 0:>10}{r['tokens'] or 0:>10}"
             for r in rows if r["kv_cache_type_k"] == r["kv_cache_type_v"] and r["modeled"]]
    layer_profile = {
        "layers": facts.n_layers, "kv_heads": facts.n_head_kv, "head_dim_k": facts.head_dim_k,
        "head_dim_v": facts.head_dim_v, "block_tokens": BLOCK_TOKENS,
        # The sliding window is applied when attention reads the cache: every layer
        # keeps every position.
        "sliding_window_layers_hold": "every position",
        "bytes_per_block": block_bytes(info, profile.kv_cache_type_k, profile.kv_cache_type_v),
    }
    return CapacityReport(layer_profile, memory_bytes, capacity_rows(rows), tuple(text))
