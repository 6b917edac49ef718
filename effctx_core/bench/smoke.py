"""`effctx smoke passkey`: the quality smoke that stands beside every throughput figure.

A 5-digit key is hidden in filler; the model is asked for it. Each trial says whether the
answer holds the key and whether the needle's tokens were still resident when the model
answered, so a wrong answer under an evicting policy is told apart from a model failure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from effctx_core.bench.prompts import passkey_prompt
from effctx_core.cancel import CancelToken
from effctx_core.contract import DecodeConfig
from effctx_core.engine import SessionEngine
from effctx_core.errors import Cancelled

ANSWER_TOKENS = 16


@dataclass(frozen=True)
class PasskeyTrial:
    length: int
    depth: float
    seed: int
    key: str
    prompt_tokens: int
    needle_start: int
    needle_end: int
    answer: str
    correct: bool  # the key is in the answer (the first ANSWER_TOKENS tokens)
    strict: bool  # the answer starts with the key
    needle_resident: bool
    evicted_tokens: int
    ttft_ms: float | None  # None when no token arrived (no room left in the context for one)

    @property
    def verdict(self) -> str:
        if self.correct:
            return "found"
        return "needle evicted" if not self.needle_resident else "missed (needle resident)"

    def to_dict(self) -> dict:
        return {**asdict(self), "verdict": self.verdict}


def run_passkey(
    engine: SessionEngine,
    lengths: Sequence[int],
    depths: Sequence[float],
    seeds: int,
    progress: Callable[[PasskeyTrial], None] = lambda trial: None,
    cancel: CancelToken | None = None,
) -> list[PasskeyTrial]:
    """`progress(trial)` after each trial; a `cancel` stops the running trial's prefill
    or answer at once (through the engine) and raises Cancelled."""
    cancel = cancel or CancelToken()
    session = engine.session
    trials = []
    for length in lengths:
        for depth in depths:
            for seed in range(seeds):
                task = passkey_prompt(session.tokenize, length, depth, seed)
                head = task.text[: task.text.index(task.needle)]
                bos = session.info.facts.add_bos
                # SPM may merge a token across the needle's edges: widen by one each side.
                start = max(0, len(session.tokenize(head, bos)) - 1)
                end = len(session.tokenize(head + task.needle, bos)) + 1
                cancel.check("smoke")
                engine.reset()
                with cancel.forwarded_to(engine.cancel):
                    result = engine.complete(task.text, DecodeConfig(max_tokens=ANSWER_TOKENS))
                if result.stop_reason == "cancelled":
                    raise Cancelled("smoke cancelled")
                answer = result.text.strip()
                report = engine.residency_report()
                trial = PasskeyTrial(
                    length=length,
                    depth=depth,
                    seed=seed,
                    key=task.key,
                    prompt_tokens=result.prefilled,
                    needle_start=start,
                    needle_end=end,
                    answer=answer,
                    correct=task.key in answer,
                    strict=answer.startswith(task.key),
                    needle_resident=engine.residency.is_resident(start, end),
                    evicted_tokens=report.evicted_tokens + report.cold_tokens,
                    ttft_ms=result.ttft_ms,
                )
                trials.append(trial)
                progress(trial)
    return trials

