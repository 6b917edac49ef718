"""KV capacity that every backend shares: which layers hold how many cache rows, and what
a token costs per layer in K and in V, from the model's facts and the element sizes the
backend's cache types have. Each backend adds its own allocation rules (llama.cpp's
256-cell padding, OpenVINO's blocks) on top: see its capacity module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Self

from effctx_core.contract import ModelFacts

# bytes of one row of `n_elements` of a cache type; `what` names the row in an error
RowBytes = Callable[[str, int, str], int]


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
class LayerKV:
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
    def from_facts(cls, facts: ModelFacts, kv_cache_type_k: str, kv_cache_type_v: str,
                   row_bytes: RowBytes) -> Self:
        # Rows are one head each (llama.cpp and OpenVINO both lay the cache out per head),
        # so an element block has to divide the head dim, not just n_head_kv * head_dim.
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
