"""`effctx bench overhead`: what the engine costs over calling llama.cpp directly.

Both sides run in this process on the same loaded model, the same context parameters
and the same prompt, alternating round by round so that drift in CPU load hits both.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import llama_cpp

from effctx_core.backends.llama.session import LlamaSession
from effctx_core.errors import Cancelled
from effctx_core.cancel import CancelToken
from effctx_core.backends.llama.runtime import LoadedModel, load_model
from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine
from effctx_core.profiles import Profile
from effctx_core.bench.workloads import filler_text


@dataclass(frozen=True)
class Rates:
    prefill_tps: float
    decode_tps: float


@dataclass(frozen=True)
class OverheadReport:
    prompt_tokens: int
    decode_tokens: int
    rounds: int
    raw: list[Rates]
    engine: list[Rates]

    def _median(self, side: list[Rates], field: str) -> float:
        return statistics.median(getattr(r, field) for r in side)

    def _ratio(self, field: str) -> float:
        # The median of per-round ratios: each round's two runs sit next to each other
        # in time, so a slow spell on a shared CPU cancels out within the pair.
        return statistics.median(getattr(e, field) / getattr(r, field) for e, r in zip(self.engine, self.raw))

    @property
    def prefill_ratio(self) -> float:
        return self._ratio("prefill_tps")

    @property
    def decode_ratio(self) -> float:
        return self._ratio("decode_tps")

    def to_dict(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "decode_tokens": self.decode_tokens,
            "rounds": self.rounds,
            "raw": {"prefill_tps": self._median(self.raw, "prefill_tps"), "decode_tps": self._median(self.raw, "decode_tps"),
                    "per_round": [asdict(r) for r in self.raw]},
            "engine": {"prefill_tps": self._median(self.engine, "prefill_tps"), "decode_tps": self._median(self.engine, "decode_tps"),
                       "per_round": [asdict(r) for r in self.engine]},
            "prefill_ratio": round(self.prefill_ratio, 4),
            "decode_ratio": round(self.decode_ratio, 4),
        }

    def table(self) -> str:
        lines = [
            f"prompt {self.prompt_tokens} tokens, {self.decode_tokens} decoded, {self.rounds} alternating rounds",
            f"{'median':8}{'prefill tok/s':>15}{'decode tok/s':>15}",
            f"{'raw':8}{self._median(self.raw, 'prefill_tps'):>15.1f}{self._median(self.raw, 'decode_tps'):>15.1f}",
            f"{'engine':8}{self._median(self.engine, 'prefill_tps'):>15.1f}{self._median(self.engine, 'decode_tps'):>15.1f}",
            f"{'ratio':8}{self.prefill_ratio:>15.3f}{self.decode_ratio:>15.3f}   (median of per-round engine/raw)",
        ]
        return "\n".join(lines)


def _raw_round(model: LoadedModel, profile: Profile, prompt: list[int], n_decode: int) -> Rates:
    """The plain loop from shared/notes: llama_decode in n_batch chunks, greedy sampling."""
    session = LlamaSession(model, profile, llama_cpp.__version__)  # same context parameters
    ctx = session._ctx
    n_batch = profile.n_batch
    batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
    sampler = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    llama_cpp.llama_sampler_chain_add(sampler, llama_cpp.llama_sampler_init_greedy())

    def decode(tokens: list[int], pos0: int) -> None:
        for i in range(0, len(tokens), n_batch):
            chunk = tokens[i : i + n_batch]
            batch.n_tokens = len(chunk)
            for j, tok in enumerate(chunk):
                batch.token[j] = tok
                batch.pos[j] = pos0 + i + j
                batch.n_seq_id[j] = 1
                batch.seq_id[j][0] = 0
                batch.logits[j] = 0
            batch.logits[len(chunk) - 1] = 1
            if llama_cpp.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed in the raw benchmark loop")

    try:
        t0 = time.perf_counter_ns()
        decode(prompt, 0)
        t1 = time.perf_counter_ns()
        pos = len(prompt)
        for _ in range(n_decode):
            token = llama_cpp.llama_sampler_sample(sampler, ctx, -1)
            decode([token], pos)
            pos += 1
        t2 = time.perf_counter_ns()
    finally:
        llama_cpp.llama_sampler_free(sampler)
        llama_cpp.llama_batch_free(batch)
        session.close()
    return Rates(len(prompt) / ((t1 - t0) / 1e9), n_decode / ((t2 - t1) / 1e9))


def _engine_round(model_path: Path, profile: Profile, prompt_text: str, n_decode: int,
                  cancel: CancelToken) -> tuple[Rates, int]:
    engine = SessionEngine(model_path, profile)
    try:
        engine.open()
        with cancel.forwarded_to(engine.cancel):
            result = engine.complete(prompt_text, DecodeConfig(max_tokens=n_decode))
    finally:
        engine.close()
    if result.stop_reason == "cancelled":
        raise Cancelled("benchmark cancelled")
    return Rates(result.prefill_tps, result.decode_tps), result.generated


def run_overhead(
    model_path: Path,
    profile: Profile,
    prompt_tokens: int,
    decode_tokens: int,
    rounds: int,
    progress: Callable[[str, int, int], None] = lambda msg, done, total: None,
    cancel: CancelToken | None = None,
) -> OverheadReport:
    """`progress(message, steps done, steps)` before each step (the warm-up, then the
    rounds). A `cancel` stops the engine's side at once and the raw loop after its round:
    the plain loop stays free of checks, it is the baseline."""
    cancel = cancel or CancelToken()
    model = load_model(model_path)
    text = filler_text(model.tokenize, prompt_tokens)
    prompt = model.tokenize(text, add_bos=model.facts.add_bos)
    progress(f"warming up ({len(prompt)}-token prompt)", 0, rounds + 1)
    # The engine may stop at an end-of-generation token; the raw loop then decodes
    # exactly as many tokens, so both rates count the same tokens.
    _, n_decode = _engine_round(model_path, profile, text, decode_tokens, cancel)
    raw, eng = [], []
    for i in range(rounds):
        cancel.check("benchmark")
        progress(f"round {i + 1}/{rounds}", i + 1, rounds + 1)
        # ABBA order: a drift in CPU load over a round does not favour either side.
        if i % 2 == 0:
            raw.append(_raw_round(model, profile, prompt, n_decode))
            cancel.check("benchmark")
            eng.append(_engine_round(model_path, profile, text, n_decode, cancel)[0])
        else:
            eng.append(_engine_round(model_path, profile, text, n_decode, cancel)[0])
            raw.append(_raw_round(model, profile, prompt, n_decode))
    return OverheadReport(len(prompt), n_decode, rounds, raw, eng)
