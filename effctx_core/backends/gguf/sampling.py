"""Token sampling with llama.cpp's sampler chains, from a context's logits or from logits
held in numpy (restored from a snapshot, or computed by another runtime): every backend
that speaks llama.cpp's vocabulary samples the same way, grammars included."""

from __future__ import annotations

import ctypes
import os
import random

import numpy as np

from effctx_core.backends.gguf.binding import llama_cpp
from effctx_core.backends.gguf.runtime import clear_llama_errors, llama_error_reason, stderr_written
from effctx_core.contract import DecodeConfig
from effctx_core.errors import EffctxError

_PARSE_ERROR = b"error parsing grammar: "
_QUOTE = 100  # characters of llama.cpp's reason kept in the one-line message


def _one_line(text: bytes | bytearray) -> str:
    flat = " ".join(text.decode("utf-8", "replace").split())
    return flat if len(flat) <= _QUOTE else flat[: _QUOTE - 1] + "…"


def grammar_sampler(vocab: ctypes.c_void_p, grammar: str) -> ctypes.c_void_p:
    """llama.cpp's sampler for a GBNF grammar whose start rule is `root`. A grammar it
    refuses is an EffctxError saying why, in one line: its parser writes the reason to
    stderr (taken from there, the rest of what was written passed on), its other checks
    (no root rule, left recursion) log it."""
    text = grammar.encode("utf-8")
    clear_llama_errors()
    with stderr_written() as written:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, text, b"root")
    why = None
    # The parser's report: "<function>: error parsing grammar: <why>\n\n<grammar>\n".
    found = written.find(_PARSE_ERROR)
    end = written.find(b"\n\n" + text + b"\n", found) if found >= 0 else -1
    if end >= 0:
        why = _one_line(written[found + len(_PARSE_ERROR) : end])
        del written[written.rfind(b"\n", 0, found) + 1 : end + len(text) + 3]
    if written:
        os.write(2, written)
    if not sampler:
        raise EffctxError(f"grammar rejected: {why or llama_error_reason('llama.cpp gave no reason')}")
    return sampler


class Sampler:
    """With a grammar, llama.cpp's grammar sampler first; then greedy, or top-p then
    temperature then a seeded draw, as one llama.cpp chain."""

    def __init__(self, config: DecodeConfig, vocab: ctypes.c_void_p):
        self.greedy = config.greedy
        self._n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab))
        # Applied before the chain rather than as its first link: a grammar that no token
        # can continue is caught between the two, where llama.cpp would go on to accept a
        # token the grammar rejected, which aborts the process.
        self._grammar = grammar_sampler(vocab, config.grammar) if config.grammar is not None else None
        self._accepted = 0
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
        if self._grammar is not None or self.greedy:
            # Greedy reads the logits in place (22 us for Gemma 3's 262,144): llama.cpp's
            # own sampling first copies them into a candidate array (about 0.4 ms a token).
            return self.from_logits(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1),
                                                          shape=(self._n_vocab,)))
        return int(llama_cpp.llama_sampler_sample(self.chain, ctx, -1))

    def from_logits(self, logits: np.ndarray) -> int:
        """What llama_sampler_sample does, on logits that are not in a llama.cpp context."""
        if self.greedy and self._grammar is None:
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
        if self._grammar is not None:
            # The grammar sets the logit of every token it rejects to -inf.
            llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(cur))
            if np.isneginf(data["logit"]).all():
                raise EffctxError(f"grammar dead end: no token of the vocabulary continues it after "
                                  f"{self._accepted} tokens")
        llama_cpp.llama_sampler_apply(self.chain, ctypes.byref(cur))
        token = int(cur.data[cur.selected].id)
        if self._grammar is not None:
            llama_cpp.llama_sampler_accept(self._grammar, token)
        llama_cpp.llama_sampler_accept(self.chain, token)
        self._accepted += 1
        return token

    def free(self) -> None:
        llama_cpp.llama_sampler_free(self.chain)
        if self._grammar is not None:
            llama_cpp.llama_sampler_free(self._grammar)
