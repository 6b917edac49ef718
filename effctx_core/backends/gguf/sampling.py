"""Token sampling with llama.cpp's sampler chains, from a context's logits or from logits
held in numpy (restored from a snapshot, or computed by another runtime): every backend
that speaks llama.cpp's vocabulary samples the same way."""

from __future__ import annotations

import ctypes
import random

import numpy as np

from effctx_core.backends.gguf.binding import llama_cpp
from effctx_core.contract import DecodeConfig


class Sampler:
    """Greedy, or top-p then temperature then a seeded draw, as one llama.cpp chain."""

    def __init__(self, config: DecodeConfig):
        self.greedy = config.greedy
        self.chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        if self.greedy:
            llama_cpp.llama_sampler_chain_add(self.chain, llama_cpp.llama_sampler_init_greedy())
            return
        if config.top_p < 1.0:
            llama_cpp.llama_sampler_chain_add(self.chain, llama_cpp.llama_sampler_init_top_p(config.top_p, 1))
        llama_cpp.llama_sampler_chain_add(self.chain, llama_cpp.llama_sampler_init_temp(config.temperature))
        seed = config.seed if config.seed is not None else random.getrandbits(32)
        llama_cpp.llama_sampler_chain_add(self.chain, llama_cpp.llama_sampler_init_dist(seed))

    def from_context(self, ctx: ctypes.c_void_p) -> int:
        return int(llama_cpp.llama_sampler_sample(self.chain, ctx, -1))

    def from_logits(self, logits: np.ndarray) -> int:
        """What llama_sampler_sample does, on logits that are not in a llama.cpp context."""
        if self.greedy:
            # The greedy sampler's own rule: the first maximum.
            return int(np.argmax(logits))
        n = len(logits)
        data = np.empty(n, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
        data["id"] = np.arange(n, dtype=np.int32)
        data["logit"] = logits
        data["p"] = 0.0
        cur = llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(llama_cpp.llama_token_data_p), size=n, selected=-1, sorted=False
        )
        llama_cpp.llama_sampler_apply(self.chain, ctypes.byref(cur))
        token = int(cur.data[cur.selected].id)
        llama_cpp.llama_sampler_accept(self.chain, token)
        return token

    def free(self) -> None:
        llama_cpp.llama_sampler_free(self.chain)
