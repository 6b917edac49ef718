"""A task family measured over lengths: every length's trials (depths × seeds) and its
no-needle control, run through the task runner, so each length's haystack is prefilled
once; per length the mean score with a Wilson interval, the needles' residency, and the
cold and warm TTFT of one of its prompts.

A family's certified context is the longest length at which, and at every shorter one,
its mean score stays at or above the threshold; a cell's effective context is the same
rule over the mean of its families' scores (RULER's).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from effctx_core.bench.quality import ControlResult, LengthResult, PasskeyGrid, wilson
from effctx_core.bench.tasks.base import TaskFamily, TaskPrompt
from effctx_core.bench.tasks.runner import TaskTrial, run_trials
from effctx_core.cancel import CancelToken
from effctx_core.engine import SessionEngine

# A length counts as effective while the mean score stays at or above this (RULER's rule;
# the certificate records the threshold it used).
EFFECTIVE_THRESHOLD = 0.8

GridProgress = Callable[[str, int, int], None]  # what runs, work done, work in all (prompt_work units)
# A prompt token's cost grows with its position, as attention reads everything before it
# (fast-long here: 2.3 ms a token over a 1,024-token prompt, 3.4 ms over 16,304): a
# prompt of n tokens is counted as n * (1 + n / ATTENTION_TOKENS), so the estimate of what
# is left does not err short when the longest prompts come last.
ATTENTION_TOKENS = 16_384


def prompt_work(tokens: int) -> int:
    return tokens + tokens * tokens // ATTENTION_TOKENS


@dataclass(frozen=True)
class TaskLength:
    length: int
    trials: int
    score: float  # the mean score of the trials (a fraction of the values found)
    full: int  # trials that found every value
    ci_low: float  # Wilson 95 % interval of the share of trials that found every value
    ci_high: float
    needles_resident: int  # trials whose every needle was resident when the model answered
    control_trials: int
    made_up: int  # control answers that named a value where there was none
    cold_ttft_ms: float | None  # one prompt from an empty cache
    warm_ttft_ms: float | None  # the same with its stable part restored (None: no state snapshots)


@dataclass(frozen=True)
class TaskGrid:
    family: str
    lengths: tuple[TaskLength, ...]  # shortest first
    prompt_tokens: int  # what running every prompt cold would have prefilled
    prefilled: int
    trials: tuple[TaskTrial, ...]

    def certified(self, threshold: float = EFFECTIVE_THRESHOLD) -> int | None:
        return longest_holding([(r.length, r.score) for r in self.lengths], threshold)

    def to_dict(self, threshold: float = EFFECTIVE_THRESHOLD) -> dict:
        return {"by_length": [asdict(r) for r in self.lengths], "prompt_tokens": self.prompt_tokens,
                "prefilled": self.prefilled, "certified": self.certified(threshold)}


def passkey_grid(grid: TaskGrid) -> PasskeyGrid:
    """The passkey family's grid as the passkey gate reads it: found = every value found."""
    lengths = tuple(LengthResult(r.length, r.full, r.trials, r.ci_low, r.ci_high, r.needles_resident)
                    for r in grid.lengths)
    return PasskeyGrid(lengths, ControlResult(sum(r.control_trials for r in grid.lengths),
                                              sum(r.made_up for r in grid.lengths)))


def longest_holding(scores: Sequence[tuple[int, float]], threshold: float) -> int | None:
    """The longest length at which, and at every shorter one, the score holds."""
    best = None
    for length, score in sorted(scores):
        if score < threshold:
            break
        best = length
    return best


def run_task_grid(engine: SessionEngine, family: TaskFamily, lengths: Sequence[int], depths: Sequence[float],
                  seeds: int, progress: GridProgress = lambda what, done, total: None,
                  cancel: CancelToken | None = None) -> TaskGrid:
    tokenize = engine.session.tokenize
    plans = {length: _prompts(family, tokenize, length, depths, seeds) for length in sorted(lengths)}
    total = sum(prompt_work(p.length) for prompts in plans.values() for p in prompts)
    done = cold = prefilled = 0
    rows: list[TaskLength] = []
    trials: list[TaskTrial] = []
    started = time.monotonic()
    for length, prompts in plans.items():
        def one_more(trial: TaskTrial, length: int = length) -> None:
            nonlocal done
            done += prompt_work(trial.length)
            progress(f"{family.name} {length:,} tokens{eta(started, done, total)}", done, total)

        progress(f"{family.name} {length:,} tokens{eta(started, done, total)}", done, total)
        run = run_trials(engine, prompts, family.answer_tokens, one_more, cancel)
        rows.append(_length(length, run.trials, run.cold_ttft_ms, run.warm_ttft_ms))
        trials += run.trials
        cold += run.prompt_tokens
        prefilled += run.prefilled
    return TaskGrid(family.name, tuple(rows), cold, prefilled, tuple(trials))


def eta(started: float, done: int, total: int) -> str:
    """What is left, at the pace so far (in prompt_work units)."""
    if not done or done >= total:
        return ""
    left = (time.monotonic() - started) / done * (total - done)
    return f" · about {left / 60:.0f} min left" if left >= 90 else f" · about {left:.0f} s left"


def _prompts(family: TaskFamily, tokenize, length: int, depths: Sequence[float], seeds: int) -> list[TaskPrompt]:
    prompts = [family.prompt(tokenize, length, depth, seed) for depth in depths for seed in range(seeds)]
    control = family.control(tokenize, length, 0)
    return prompts + ([control] if control is not None else [])


def _length(length: int, trials: Sequence[TaskTrial], cold_ms: float | None, warm_ms: float | None) -> TaskLength:
    asked = [t for t in trials if not t.control]
    controls = [t for t in trials if t.control]
    full = sum(t.score == 1.0 for t in asked)
    low, high = wilson(full, len(asked))
    return TaskLength(
        length=length, trials=len(asked), score=round(statistics.fmean(t.score for t in asked), 4) if asked else 0.0,
        full=full, ci_low=round(low, 4), ci_high=round(high, 4),
        needles_resident=sum(t.needles_resident for t in asked), control_trials=len(controls),
        made_up=sum(t.score < 1.0 for t in controls), cold_ttft_ms=cold_ms, warm_ttft_ms=warm_ms)
