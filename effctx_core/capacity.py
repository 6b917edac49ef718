"""KV capacity: what a context costs in bytes, per layer and K/V type, and what a memory
budget buys in hot (resident) tokens.

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

import re
from dataclasses import dataclass

from effctx_core.errors import EffctxError
from effctx_core.contract import ModelFacts

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

# Without flash attention llama.cpp refuses to create a context with any other V type.
PLAIN_V_TYPES = ("f32", "f16", "bf16")

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
class KVBytes:
    """Bytes of K rows, V rows, and everything else (headers, cell positions)."""

    k: int
    v: int
    overhead: int = 0

    @property
    def total(self) -> int:
        return self.k + self.v + self.overhead


@dataclass(frozen=True)
class LayerKVProfile:
    global_layers: tuple[int, ...]
    swa_layers: tuple[int, ...]
    window: int | None
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    kv_cache_type_k: str
    kv_cache_type_v: str
    k_bytes_per_token_layer: int
    v_bytes_per_token_layer: int

    @classmethod
    def from_facts(cls, facts: ModelFacts, kv_cache_type_k: str, kv_cache_type_v: str) -> "LayerKVProfile":
        # Rows are one head each (llama.cpp views the cache per head), so the block has
        # to divide the head dim, not just n_head_kv * head_dim.
        k_head = row_bytes(kv_cache_type_k, facts.head_dim_k, "model's K head dim")
        v_head = row_bytes(kv_cache_type_v, facts.head_dim_v, "model's V head dim")
        swa = facts.swa_layers
        return cls(
            global_layers=tuple(facts.global_layers) if swa else tuple(range(facts.n_layers)),
            swa_layers=swa,
            window=facts.sliding_window if swa else None,
            n_head_kv=facts.n_head_kv,
            head_dim_k=facts.head_dim_k,
            head_dim_v=facts.head_dim_v,
            kv_cache_type_k=kv_cache_type_k,
            kv_cache_type_v=kv_cache_type_v,
            k_bytes_per_token_layer=k_head * facts.n_head_kv,
            v_bytes_per_token_layer=v_head * facts.n_head_kv,
        )

    @property
    def n_layers(self) -> int:
        return len(self.global_layers) + len(self.swa_layers)

    @property
    def bytes_per_token_layer(self) -> int:
        return self.k_bytes_per_token_layer + self.v_bytes_per_token_layer

    @property
    def bytes_per_token_all_layers(self) -> int:
        """One cell in every layer: the allocated cache per n_ctx cell with swa_full."""
        return self.n_layers * self.bytes_per_token_layer

    @property
    def needs_flash_attn(self) -> bool:
        return self.kv_cache_type_v not in PLAIN_V_TYPES

    def _caches(self, global_cells: int, swa_cells: int) -> list[tuple[int, int]]:
        """(cells, layers) per llama.cpp cache, in the order it serializes them."""
        caches = [(global_cells, len(self.global_layers))]
        if self.swa_layers:
            caches.append((swa_cells, len(self.swa_layers)))
        return caches

    def _kv(self, caches: list[tuple[int, int]]) -> tuple[int, int]:
        k = sum(cells * layers * self.k_bytes_per_token_layer for cells, layers in caches)
        v = sum(cells * layers * self.v_bytes_per_token_layer for cells, layers in caches)
        return k, v

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


# ---------------------------------------------------------------- memory budget


@dataclass(frozen=True)
class HotContext:
    """The hot context a memory budget allows, and which limit binds."""

    tokens: int
    binding: str  # "memory", "model" or "n_ctx"
    reason: str
    memory_bytes: int
    cache_bytes: int  # what llama.cpp allocates for `tokens`


def format_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}".rstrip("0").rstrip(".") + f" {unit}"
    return f"{n} B"


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


# ---------------------------------------------------------------- parsing

_UNITS = {
    "b": 1,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
    "kb": 10**3, "mb": 10**6, "gb": 10**9,
}
_MEMORY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*")


def parse_memory(text: str) -> int:
    """'2GiB' -> 2147483648. Units: B, KiB, MiB, GiB (1024) and KB, MB, GB (1000)."""
    units = "B, KiB, MiB, GiB, KB, MB, GB"
    m = _MEMORY.fullmatch(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise EffctxError(f"cannot read memory size {text!r}: expected a number and a unit ({units}), e.g. 2GiB")
    number, unit = m.group(1), _UNITS[m.group(2).lower()]
    whole, _, frac = number.partition(".")
    # Exact arithmetic: 1.1GB is 1,100,000,000 bytes, not a float's neighbour of it.
    scaled = int(whole + frac) * unit
    bytes_, rest = divmod(scaled, 10 ** len(frac))
    if rest:
        raise EffctxError(f"memory size {text!r} is not a whole number of bytes")
    if bytes_ <= 0:
        raise EffctxError(f"memory size {text!r} must be more than 0 bytes")
    return bytes_
