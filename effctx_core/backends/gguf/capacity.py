"""llama.cpp's KV memory layout: what a context costs in bytes, per layer and K/V type, and
what a memory budget buys in hot (resident) tokens.

Every number here is llama.cpp's own layout (llama-cpp-python 0.3.36), checked byte for
byte against the default model in tests/test_capacity.py:

- A ggml row of `d` elements of a cache type takes `d / block_elems * block_bytes` bytes.
  One cache row is one head dim, so quantized types need head dims that are multiples of
  their 32-element block.
- Allocated cache. llama.cpp rounds n_ctx up to a multiple of 256 (16 -> 256, 600 -> 768,
  1100 -> 1280), and every global layer holds that many cells. Windowed layers hold the
  same with swa_full; without it their cache is min(n_ctx, pad256(window + n_ubatch))
  cells (window 512: 1024 cells at n_ubatch 512, 768 at n_ubatch 64), because llama.cpp
  pads the sliding-window cache to 256 as well. Cells x layers x row bytes is the whole
  allocation: rows are multiples of 64 bytes, so no tensor alignment is added.
- Sequence state (llama_state_seq_get_size): an 8-byte header, then per cache (global,
  then windowed; one cache for a model without a window) 4 bytes of stream count, 4 of
  cell count and, if it holds cells, 12 bytes per cell (position, seq-id count, seq id),
  8 bytes (V layout, layer count), 24 bytes per layer (K and V type and row size) and the
  K then V rows. Global layers hold all N positions; windowed layers only the last
  min(N, window), with or without swa_full (llama.cpp skips window-masked cells).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from effctx_core.backends.gguf.context import PLAIN_V_TYPES, context_of
from effctx_core.capacity import KVBytes, LayerKV, RowBytes
from effctx_core.contract import CapacityReport, ModelFacts, ModelInfo
from effctx_core.contract.records import capacity_rows
from effctx_core.errors import EffctxError
from effctx_core.units import format_bytes

if TYPE_CHECKING:
    # The profile is read, never built, here: the backends sit below the profile schema.
    from effctx_core.profiles import Profile

# (elements per block, bytes per block), from ggml's type traits.
CACHE_TYPE_BLOCKS: dict[str, tuple[int, int]] = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q8_0": (32, 34),
    "q4_0": (32, 18),
    "q4_1": (32, 20),
    "q5_0": (32, 22),
    "q5_1": (32, 24),
    "iq4_nl": (32, 18),
}

CELL_PAD = 256  # llama.cpp's n_ctx step, and its sliding-window cache step
STATE_HEADER_BYTES = 8
CACHE_FRAME_BYTES = 8  # stream count + cell count, written even for an empty cache
CACHE_DATA_HEADER_BYTES = 8  # V layout + layer count, only for a cache holding cells
LAYER_HEADER_BYTES = 24  # K type + row size, V type + row size (or element size + width)
CELL_META_BYTES = 12  # position, seq-id count, seq id


def _pad(n: int, step: int = CELL_PAD) -> int:
    return -(-n // step) * step


def row_bytes(cache_type: str, n_elements: int, what: str = "row") -> int:
    """Bytes of one ggml row of `n_elements` of `cache_type`."""
    if cache_type not in CACHE_TYPE_BLOCKS:
        known = ", ".join(CACHE_TYPE_BLOCKS)
        raise EffctxError(f"unknown KV cache type {cache_type!r} (known: {known})")
    block_elems, block_bytes = CACHE_TYPE_BLOCKS[cache_type]
    if n_elements % block_elems:
        raise EffctxError(
            f"KV cache type {cache_type} packs {block_elems} elements per block, "
            f"but the {what} {n_elements} is not a multiple of {block_elems}"
        )
    return n_elements // block_elems * block_bytes


@dataclass(frozen=True)
class LayerKVProfile(LayerKV):
    """The neutral layer layout with ggml's element sizes and llama.cpp's cache rules."""

    @classmethod
    def from_facts(cls, facts: ModelFacts, kv_cache_type_k: str, kv_cache_type_v: str,
                   row_bytes: RowBytes = row_bytes) -> "LayerKVProfile":
        return super().from_facts(facts, kv_cache_type_k, kv_cache_type_v, row_bytes)

    @property
    def needs_flash_attn(self) -> bool:
        return self.kv_cache_type_v not in PLAIN_V_TYPES

    # ------------------------------------------------------------ allocated cache

    def swa_cache_cap(self, n_ubatch: int) -> int:
        """Cells a windowed layer keeps without swa_full: the window plus one ubatch."""
        return _pad(self.window + n_ubatch) if self.window else 0

    def cache_cells(self, n_ctx: int, n_ubatch: int = 512, swa_full: bool = True) -> tuple[int, int]:
        """(global cells, windowed cells) llama.cpp allocates for a context."""
        n_cells = _pad(n_ctx)
        if not self.swa_layers:
            return n_cells, 0
        if swa_full:
            return n_cells, n_cells
        return n_cells, min(n_cells, self.swa_cache_cap(n_ubatch))

    def cache_bytes(self, n_ctx: int, n_ubatch: int = 512, swa_full: bool = True) -> KVBytes:
        """The KV cache llama.cpp allocates for a context of n_ctx tokens."""
        k, v = self._kv(self._caches(*self.cache_cells(n_ctx, n_ubatch, swa_full)))
        return KVBytes(k, v)

    def layers_cache_bytes(self, layers: tuple[int, ...], n_ctx: int, n_ubatch: int = 512,
                           swa_full: bool = True) -> int:
        """The KV cache of some layers alone: what a device holding them allocates."""
        global_cells, swa_cells = self.cache_cells(n_ctx, n_ubatch, swa_full)
        n_global = sum(1 for i in layers if i in self.global_layers)
        return (n_global * global_cells + (len(layers) - n_global) * swa_cells) * self.bytes_per_token_layer

    # ------------------------------------------------------------ sequence state

    def seq_state_cells(self, n_tokens: int) -> tuple[int, int]:
        """(global, windowed) cells in the serialized state of an n-token sequence."""
        return n_tokens, min(n_tokens, self.window) if self.window else 0

    def seq_state_bytes(self, n_tokens: int) -> KVBytes:
        """What llama_state_seq_get_size reports for one sequence of n_tokens."""
        caches = self._caches(*self.seq_state_cells(n_tokens))
        k, v = self._kv(caches)
        overhead = STATE_HEADER_BYTES
        for cells, layers in caches:
            overhead += CACHE_FRAME_BYTES
            if cells:
                overhead += cells * CELL_META_BYTES + CACHE_DATA_HEADER_BYTES + layers * LAYER_HEADER_BYTES
        return KVBytes(k, v, overhead)





@dataclass(frozen=True)
class HotContext:
    """The hot context a memory budget allows, and which limit binds."""

    tokens: int
    binding: str  # "memory", "model" or "n_ctx"
    reason: str
    memory_bytes: int
    cache_bytes: int  # what llama.cpp allocates for `tokens`


def _memory_tokens(profile: LayerKVProfile, memory_bytes: int, swa_full: bool, n_ubatch: int) -> tuple[int, str]:
    """The most tokens whose allocated cache fits, in llama.cpp's 256-cell steps."""
    step = f"rounded down to a multiple of {CELL_PAD}, llama.cpp's n_ctx step"
    budget = format_bytes(memory_bytes)
    per_cell = profile.bytes_per_token_all_layers
    if per_cell * CELL_PAD > memory_bytes:
        return 0, (f"memory budget: {budget} is less than the {format_bytes(per_cell * CELL_PAD)} "
                   f"of llama.cpp's smallest context ({CELL_PAD} cells)")
    cap = profile.swa_cache_cap(n_ubatch)
    if swa_full or not profile.swa_layers or memory_bytes < cap * per_cell:
        # Every layer holds every cell.
        tokens = memory_bytes // per_cell // CELL_PAD * CELL_PAD
        return tokens, f"memory budget: {budget} / {per_cell:,} B per token ({step})"
    # Windowed layers stop growing at `cap` cells; past that only global layers do.
    fixed = cap * len(profile.swa_layers) * profile.bytes_per_token_layer
    per_token = len(profile.global_layers) * profile.bytes_per_token_layer
    if not per_token:  # only windowed layers: past the cap, more tokens cost nothing
        return 1 << 62, f"memory budget: {budget} holds every windowed cell"
    tokens = (memory_bytes - fixed) // per_token // CELL_PAD * CELL_PAD
    return tokens, (f"memory budget: {budget} - {format_bytes(fixed)} for {cap:,} sliding-window cells "
                    f"/ {per_token:,} B per token ({step})")


def hot_context(
    profile: LayerKVProfile,
    memory_bytes: int,
    model_context: int,
    n_ctx_limit: int | None = None,
    swa_full: bool = True,
    n_ubatch: int = 512,
) -> HotContext:
    """The hot context a memory budget for the KV cache allows, under the model's and
    the profile's context limits. Ties go to the limit that is not memory."""
    mem_tokens, mem_reason = _memory_tokens(profile, memory_bytes, swa_full, n_ubatch)
    candidates = [("model", model_context, f"model context length {model_context}")]
    if n_ctx_limit is not None:
        candidates.append(("n_ctx", n_ctx_limit, f"n_ctx {n_ctx_limit}"))
    candidates.append(("memory", mem_tokens, mem_reason))
    binding, tokens, reason = min(candidates, key=lambda c: c[1])
    cache = profile.cache_bytes(tokens, n_ubatch, swa_full).total if tokens else 0
    return HotContext(tokens, binding, reason, memory_bytes, cache)


def capacity_table(
    facts: ModelFacts,
    memory_bytes: int,
    n_ctx_limit: int | None,
    swa_full: bool,
    n_ubatch: int = 512,
) -> list[dict]:
    """One row per K/V cache type pair llama.cpp accepts for this model.

    bytes_per_token is the allocated cache per hot token at max_hot_tokens (with swa_full
    every layer's row: 18,432 B for f16 on Gemma 3 270M); state_bytes_per_token is what a
    snapshot of that many tokens costs per token, where windowed layers keep only the
    window.
    """
    rows = []
    for k_type in CACHE_TYPE_BLOCKS:
        for v_type in CACHE_TYPE_BLOCKS:
            try:
                profile = LayerKVProfile.from_facts(facts, k_type, v_type)
            except EffctxError:
                continue  # a block that does not divide the head dim: llama.cpp refuses it
            hot = hot_context(profile, memory_bytes, facts.context_length, n_ctx_limit, swa_full, n_ubatch)
            n = hot.tokens
            rows.append({
                "kv_cache_type_k": k_type,
                "kv_cache_type_v": v_type,
                "needs_flash_attn": profile.needs_flash_attn,
                "k_bytes_per_token_layer": profile.k_bytes_per_token_layer,
                "v_bytes_per_token_layer": profile.v_bytes_per_token_layer,
                "bytes_per_token": round(hot.cache_bytes / n, 1) if n else None,
                "state_bytes_per_token": round(profile.seq_state_bytes(n).total / n, 1) if n else None,
                "max_hot_tokens": n,
                "tokens": n,
                "cache_bytes": hot.cache_bytes,
                "binding": hot.binding,
                "reason": hot.reason,
            })
    return rows


def layer_profile_dict(profile: LayerKVProfile) -> dict:
    return {
        "global_layers": list(profile.global_layers),
        "swa_layers": list(profile.swa_layers),
        "window": profile.window,
        "n_head_kv": profile.n_head_kv,
        "head_dim_k": profile.head_dim_k,
        "head_dim_v": profile.head_dim_v,
        "kv_cache_type_k": profile.kv_cache_type_k,
        "kv_cache_type_v": profile.kv_cache_type_v,
        "k_bytes_per_token_layer": profile.k_bytes_per_token_layer,
        "v_bytes_per_token_layer": profile.v_bytes_per_token_layer,
        "bytes_per_token_all_layers": profile.bytes_per_token_all_layers,
        "needs_flash_attn": profile.needs_flash_attn,
    }


def capacity_lines(report: dict, profile: Profile) -> list[str]:
    """The report as `effctx info` prints it."""
    lp, memory = report["layer_profile"], report["capacity"]["memory_bytes"]
    swa_full = context_of(profile).swa_full
    lines = [
        f"KV cache     {profile.kv_cache_type_k}/{profile.kv_cache_type_v}: K {lp['k_bytes_per_token_layer']} + "
        f"V {lp['v_bytes_per_token_layer']} B per token per layer; {len(lp['global_layers'])} global + "
        f"{len(lp['swa_layers'])} windowed layers; {format_bytes(lp['cache_bytes'])} allocated at n_ctx {lp['n_ctx']}"
        f"{'' if swa_full else ' (windowed layers capped)'}",
        f"capacity for {format_bytes(memory)} (swa_full {'on' if swa_full else 'off'}; "
        "every K/V pair is in --json)",
        f"  {'K/V':14}{'B/token':>10}{'max hot tokens':>16}  bound by",
    ]
    for row in report["capacity"]["rows"]:
        if row["kv_cache_type_k"] != row["kv_cache_type_v"]:
            continue
        pair = f"{row['kv_cache_type_k']}/{row['kv_cache_type_v']}" + ("*" if row["needs_flash_attn"] else "")
        lines.append(f"  {pair:14}{row['bytes_per_token'] or 0:>10.0f}{row['max_hot_tokens']:>16}  {row['reason']}")
    lines.append("  * needs flash attention")
    for share in report.get("placement", []):
        lines.append(f"on worker    {share['where']}: {share['layers_text']}, KV {format_bytes(share['kv_bytes'])} "
                     f"(llama.cpp's figure; modeled {format_bytes(share['kv_bytes_modeled'])}), "
                     f"weights {format_bytes(share['model_bytes'])}")
    return lines


def capacity_report(info: ModelInfo, profile: Profile, memory_bytes: int) -> CapacityReport:
    """`effctx info`'s layer profile and capacity table for a llama.cpp context."""
    layers = LayerKVProfile.from_facts(info.facts, profile.kv_cache_type_k, profile.kv_cache_type_v)
    swa_full = context_of(profile).swa_full
    layer_profile = {
        **layer_profile_dict(layers),
        "cache_bytes": layers.cache_bytes(info.n_ctx, profile.n_batch, swa_full).total,
        "n_ctx": info.n_ctx,
        "swa_full": swa_full,
    }
    rows = capacity_rows(capacity_table(info.facts, memory_bytes, None, swa_full, profile.n_batch))
    # Where the cache lives when workers hold the layers: each worker's share, as
    # llama.cpp allocated it and as the layer math gives it.
    placement = tuple({
        "where": share.where, "device": share.device, "layers": list(share.layers),
        "layers_text": share.layer_text, "model_bytes": share.model_bytes, "kv_bytes": share.kv_bytes,
        "kv_bytes_modeled": layers.layers_cache_bytes(share.layers, info.n_ctx, profile.n_batch, swa_full),
    } for share in info.placement)
    report = CapacityReport(layer_profile, memory_bytes, rows, (),
                            {"swa_full": swa_full, "n_ctx_limit": None}, placement)
    return replace(report, text=tuple(capacity_lines(report.to_dict(), profile)))
