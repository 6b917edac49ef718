"""Runs task prompts on an engine, prefilling what they share only once.

The prompts of one family at one length share their haystack, so each shares a start
with the others (everything before its first needle, at least). Their token sequences,
sorted, are walked as a trie: at every point where two prompts part, the session's
state is snapshotted once, and every later prompt that passes that point restores it
and prefills only what follows. Each prompt is tokenized whole and fed to the engine in
parts, so the model reads exactly the tokens a cold run would.

A cell that cannot snapshot its state, or whose policy evicts (its cache then holds
another set of tokens than a cold run's would), runs every prompt cold.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from effctx_core.backends.tape import common_prefix_length
from effctx_core.bench.tasks.base import TaskPrompt
from effctx_core.cancel import CancelToken
from effctx_core.contract import DecodeConfig, SessionSnapshot
from effctx_core.engine import SessionEngine
from effctx_core.errors import Cancelled


@dataclass(frozen=True)
class TaskTrial:
    family: str
    length: int
    depth: float
    seed: int
    control: bool
    prompt_tokens: int
    answers: tuple[str, ...]
    answer: str
    score: float
    needles_resident: bool  # every needle's tokens were resident when the model answered
    evicted_tokens: int
    shared: int  # prompt tokens restored from a state an earlier prompt left, not prefilled again
    ttft_ms: float | None  # from this prompt's own start: its remaining prefill and first token

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TrialRun:
    trials: tuple[TaskTrial, ...]
    prompt_tokens: int  # what running every prompt cold from an empty cache would prefill
    prefilled: int  # what was prefilled
    snapshot_ms: float  # taking and restoring the shared states

    @property
    def saved(self) -> int:
        """Prompt tokens restored (or kept from the tape before) instead of prefilled again."""
        return self.prompt_tokens - self.prefilled


def shares_prefills(engine: SessionEngine) -> bool:
    """Whether prompts can start from a state another prompt left: the cell snapshots
    its state and keeps every token it is given."""
    return engine.info.capabilities.state_snapshot.supported and not engine.residency.evicts


def run_trials(engine: SessionEngine, prompts: Sequence[TaskPrompt], answer_tokens: int,
               on_trial: Callable[[TaskTrial], None] = lambda trial: None,
               cancel: CancelToken | None = None, share: bool = True) -> TrialRun:
    """Every prompt once, answered with up to `answer_tokens` greedy tokens; trials in
    the order the walk reaches them. `share=False` runs each prompt cold."""
    cancel = cancel or CancelToken()
    session = engine.session
    tokens = [session.tokenize(p.text, session.info.facts.add_bos) for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: tokens[i])
    # parts[k]: how much the k-th prompt of the walk shares with the next one
    parts = [common_prefix_length(tokens[a], tokens[b]) for a, b in zip(order, order[1:])] + [0]
    sharing = share and shares_prefills(engine)
    held: list[tuple[int, SessionSnapshot]] = []  # the states on the walk's current path, shallowest first
    trials, prefilled, snapshot_ns = [], 0, 0
    for k, i in enumerate(order):
        cancel.check("task trials")
        own = tokens[i]
        with cancel.forwarded_to(engine.cancel):
            if sharing:
                before = parts[k - 1] if k else 0
                while held and held[-1][0] > before:
                    held.pop()
                t0 = time.perf_counter_ns()
                at = restored = _start_from(engine, held)
                snapshot_ns += time.perf_counter_ns() - t0
                for point in _parting_points(parts, k, at, len(own)):
                    prefilled += _prefill(engine, own[at:point])
                    t0 = time.perf_counter_ns()
                    held.append((point, engine.snapshot()))
                    snapshot_ns += time.perf_counter_ns() - t0
                    at = point
            else:
                engine.reset()
                at = restored = 0
            trial, computed = _answer(engine, prompts[i], own, at, restored, answer_tokens)
        prefilled += computed
        trials.append(trial)
        on_trial(trial)
    return TrialRun(tuple(trials), sum(map(len, tokens)), prefilled, round(snapshot_ns / 1e6, 1))


def _start_from(engine: SessionEngine, held: list[tuple[int, SessionSnapshot]]) -> int:
    """Restore the deepest state this prompt shares; how many of its tokens that holds."""
    if not held:
        engine.reset()
        return 0
    point, snapshot = held[-1]
    engine.restore(snapshot)
    return point


def _parting_points(parts: list[int], k: int, at: int, length: int) -> list[int]:
    """Where, past `at`, this prompt parts from a later one: the states later prompts
    will restore. A later prompt shares with this one the least of the partings
    between them (the walk is sorted), so the points only fall as the walk goes on."""
    points, least = [], length - 1  # the last token is this prompt's own: it starts the answer
    for shared in parts[k:]:
        least = min(least, shared)
        if least <= at:
            break
        points.append(least)
    return sorted(set(points))


def _prefill(engine: SessionEngine, tokens: Sequence[int]) -> int:
    result = engine.complete_tokens(tokens, DecodeConfig(max_tokens=0))
    if result.stop_reason == "cancelled":
        raise Cancelled("task trials cancelled")
    return result.prefilled


def _answer(engine: SessionEngine, prompt: TaskPrompt, tokens: list[int], at: int, restored: int,
            answer_tokens: int) -> tuple[TaskTrial, int]:
    """The trial (the tape holds its first `at` tokens, `restored` of them from an earlier
    prompt's state), and the prompt tokens its last turn computed."""
    result = engine.complete_tokens(tokens[at:], DecodeConfig(max_tokens=answer_tokens), input_text=prompt.family)
    if result.stop_reason == "cancelled":
        raise Cancelled("task trials cancelled")
    answer = result.text.strip()
    report = engine.residency_report()
    return TaskTrial(
        family=prompt.family, length=prompt.length, depth=prompt.depth, seed=prompt.seed, control=prompt.control,
        prompt_tokens=len(tokens), answers=prompt.answers, answer=answer, score=prompt.score(answer),
        needles_resident=all(engine.residency.is_resident(*span) for span in _needle_tokens(engine, prompt)),
        evicted_tokens=report.evicted_tokens + report.cold_tokens, shared=restored, ttft_ms=result.ttft_ms,
    ), result.prefilled


def _needle_tokens(engine: SessionEngine, prompt: TaskPrompt) -> list[tuple[int, int]]:
    """Each needle's token span, widened by one each side: SPM may merge a token across
    a needle's edge."""
    session = engine.session
    bos = session.info.facts.add_bos
    return [(max(0, len(session.tokenize(prompt.text[:start], bos)) - 1),
             len(session.tokenize(prompt.text[:end], bos)) + 1) for start, end in prompt.needles]
