"""`effctx bench overhead`: what the engine costs over the backend's plain loop, and how it
compares with what a user would run instead (the library's own high-level API).

All three run in this process with the same profile (context settings, thread count) and
the same prompt, in a rotating order round by round, so drift in CPU load hits each alike.
The backend supplies both baselines (`Backend.baseline`); this module knows no runtime.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from effctx_core.backends.registry import get_backend
from effctx_core.bench.prompts import filler_text
from effctx_core.cancel import CancelToken
from effctx_core.contract import BaselineRun, DecodeConfig
from effctx_core.engine import SessionEngine, TurnResult
from effctx_core.errors import Cancelled, EffctxError
from effctx_core.profiles import Profile


@dataclass(frozen=True)
class Rates:
    prefill_tps: float
    decode_tps: float

    @classmethod
    def of(cls, run: BaselineRun) -> "Rates":
        return cls(_rate(run.prefill_tokens, run.prefill_ms), _rate(run.decode_tokens, run.decode_ms))


def _rate(tokens: int, ms: float) -> float:
    return tokens / (ms / 1000.0) if ms > 0 else 0.0


@dataclass(frozen=True)
class OverheadReport:
    prompt_tokens: int
    decode_tokens: int
    rounds: int
    raw: list[Rates]
    engine: list[Rates]
    library: list[Rates]
    raw_name: str = "raw loop"
    library_name: str = "library"

    @staticmethod
    def _median(side: list[Rates], field: str) -> float:
        return statistics.median(getattr(r, field) for r in side)

    def _ratio(self, field: str, against: list[Rates]) -> float:
        # The median of per-round ratios: each round's runs sit next to each other in
        # time, so a slow spell on a shared CPU cancels out within the round.
        return statistics.median(getattr(e, field) / getattr(r, field) for e, r in zip(self.engine, against))

    @property
    def prefill_ratio(self) -> float:
        return self._ratio("prefill_tps", self.raw)

    @property
    def decode_ratio(self) -> float:
        return self._ratio("decode_tps", self.raw)

    @property
    def library_prefill_ratio(self) -> float:
        return self._ratio("prefill_tps", self.library)

    @property
    def library_decode_ratio(self) -> float:
        return self._ratio("decode_tps", self.library)

    def _side(self, side: list[Rates]) -> dict:
        return {"prefill_tps": self._median(side, "prefill_tps"), "decode_tps": self._median(side, "decode_tps"),
                "per_round": [asdict(r) for r in side]}

    def to_dict(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "decode_tokens": self.decode_tokens,
            "rounds": self.rounds,
            "raw": {**self._side(self.raw), "name": self.raw_name},
            "engine": self._side(self.engine),
            "library": {**self._side(self.library), "name": self.library_name},
            "prefill_ratio": round(self.prefill_ratio, 4),
            "decode_ratio": round(self.decode_ratio, 4),
            "library_prefill_ratio": round(self.library_prefill_ratio, 4),
            "library_decode_ratio": round(self.library_decode_ratio, 4),
        }

    def table(self) -> str:
        def row(label: str, side: list[Rates]) -> str:
            return f"{label:9}{self._median(side, 'prefill_tps'):>15.1f}{self._median(side, 'decode_tps'):>15.1f}"

        return "\n".join([
            f"prompt {self.prompt_tokens} tokens, {self.decode_tokens} decoded, {self.rounds} rotating rounds",
            f"raw: {self.raw_name}; library: {self.library_name}",
            f"{'median':9}{'prefill tok/s':>15}{'decode tok/s':>15}",
            row("raw", self.raw),
            row("library", self.library),
            row("engine", self.engine),
            f"{'/ raw':9}{self.prefill_ratio:>15.3f}{self.decode_ratio:>15.3f}   (median of per-round engine/raw)",
            f"{'/ library':9}{self.library_prefill_ratio:>15.3f}{self.library_decode_ratio:>15.3f}"
            "   (median of per-round engine/library)",
        ])


def _complete(engine: SessionEngine, prompt_text: str, n_decode: int, cancel: CancelToken) -> TurnResult:
    with cancel.forwarded_to(engine.cancel):
        result = engine.complete(prompt_text, DecodeConfig(max_tokens=n_decode))
    if result.stop_reason == "cancelled":
        raise Cancelled("benchmark cancelled")
    return result


def _engine_round(model_path: Path, profile: Profile, prompt_text: str, n_decode: int, cancel: CancelToken) -> Rates:
    engine = SessionEngine(model_path, profile)
    try:
        engine.open()
        result = _complete(engine, prompt_text, n_decode, cancel)
    finally:
        engine.close()
    # The prefill rate is over the time to the first token, as the baselines' are: it is
    # what the user waits, and a runtime that defers the prefill into its first decode
    # step (a paged pipeline without prefix caching) is timed by it truthfully.
    if result.ttft_ms is None:
        raise EffctxError(f"the engine decoded no token after its {result.prefilled:,}-token prompt "
                          f"({result.stop_reason}): no time to first token to rate its prefill by")
    return Rates(_rate(result.prefilled, result.ttft_ms), result.decode_tps)


def _warm_up(model_path: Path, profile: Profile, prompt_tokens: int, decode_tokens: int, cancel: CancelToken,
             progress: Callable[[str, int, int], None], rounds: int) -> tuple[str, list[int], int]:
    """The prompt, made with the session's own tokenizer, and the tokens the engine
    decodes from it: it may stop at an end-of-generation token, and the baselines then
    decode exactly as many, so every rate counts the same tokens."""
    engine = SessionEngine(model_path, profile)
    try:
        engine.open()
        session = engine.session
        text = filler_text(session.tokenize, prompt_tokens)
        prompt = session.tokenize(text, add_bos=session.info.facts.add_bos)
        progress(f"warming up ({len(prompt)}-token prompt)", 0, rounds + 1)
        return text, prompt, _complete(engine, text, decode_tokens, cancel).generated
    finally:
        engine.close()


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
    rounds). A `cancel` stops the engine's side at once and a baseline after its run:
    the baselines stay free of checks."""
    cancel = cancel or CancelToken()
    text, prompt, n_decode = _warm_up(model_path, profile, prompt_tokens, decode_tokens, cancel, progress, rounds)
    baseline = get_backend(profile.backend).baseline(model_path, profile)
    raw: list[Rates] = []
    eng: list[Rates] = []
    lib: list[Rates] = []
    try:
        baseline.raw(prompt, n_decode)  # the warm-up of the baselines' own contexts
        baseline.library(prompt, n_decode)
        sides: list[Callable[[], None]] = [
            lambda: raw.append(Rates.of(baseline.raw(prompt, n_decode))),
            lambda: eng.append(_engine_round(model_path, profile, text, n_decode, cancel)),
            lambda: lib.append(Rates.of(baseline.library(prompt, n_decode))),
        ]
        for i in range(rounds):
            progress(f"round {i + 1}/{rounds}", i + 1, rounds + 1)
            # Each round starts with the next side: none is always first or last.
            for k in range(len(sides)):
                cancel.check("benchmark")
                sides[(i + k) % len(sides)]()
    finally:
        baseline.close()
    return OverheadReport(len(prompt), n_decode, rounds, raw, eng, lib, baseline.name, baseline.library_name)
