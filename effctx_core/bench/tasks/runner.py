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
from effctx_core.engine import SessionEngine, TurnResult
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
    # The walk's first prompt from an empty cache: every part's prefill and its first token.
    cold_ttft_ms: float | None
    # The same prompt again with its stable part (all but the question) restored: the
    # restore, the question's prefill and the first token. None without shared states.
    warm_ttft_ms: float | None

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
    walk = _Walk(engine, prompts, share and shares_prefills(engine))
    trials = []
    for k in range(len(prompts)):
        cancel.check("task trials")
        with cancel.forwarded_to(engine.cancel):
            trial = walk.answer(k, answer_tokens)
        trials.append(trial)
        on_trial(trial)
    return TrialRun(tuple(trials), sum(map(len, walk.tokens)), walk.prefilled, round(walk.snapshot_ns / 1e6, 1),
                    walk.cold_ttft_ms, walk.warm_ttft_ms)


class _Walk:
    """The prompts' tokens sorted, and the states on the walk's current path."""

    def __init__(self, engine: SessionEngine, prompts: Sequence[TaskPrompt], sharing: bool):
        self.engine, self.sharing = engine, sharing
        session = engine.session
        bos = session.info.facts.add_bos
        tokens = [session.tokenize(p.text, bos) for p in prompts]
        order = sorted(range(len(prompts)), key=lambda i: tokens[i])
        self.prompts = [prompts[i] for i in order]
        self.tokens = [tokens[i] for i in order]
        # parts[k]: how much the k-th prompt of the walk shares with the next one
        self.parts = [common_prefix_length(a, b) for a, b in zip(self.tokens, self.tokens[1:])] + [0]
        # Where the first prompt's question starts: its warm start restores everything before.
        self.question_at = 0
        if self.prompts and self.prompts[0].question:
            stable = session.tokenize(self.prompts[0].stable, bos)
            self.question_at = min(common_prefix_length(stable, self.tokens[0]), len(self.tokens[0]) - 1)
        self.held: list[tuple[int, SessionSnapshot]] = []  # shallowest first
        self.prefilled = self.snapshot_ns = 0
        self.cold_ttft_ms: float | None = None
        self.warm_ttft_ms: float | None = None

    def answer(self, k: int, answer_tokens: int) -> TaskTrial:
        engine, own = self.engine, self.tokens[k]
        at = restored = self._start(k)
        points = _parting_points(self.parts, k, at, len(own)) if self.sharing else []
        if k == 0 and self.sharing and self.question_at > at:
            points = sorted({*points, self.question_at})
        parts_ms = 0.0
        for point in points:
            result = engine.complete_tokens(own[at:point], DecodeConfig(max_tokens=0))
            _check(result)
            self.prefilled += result.prefilled
            parts_ms += result.prefill_ms
            t0 = time.perf_counter_ns()
            self.held.append((point, engine.snapshot()))
            self.snapshot_ns += time.perf_counter_ns() - t0
            at = point
        prompt = self.prompts[k]
        result = engine.complete_tokens(own[at:], DecodeConfig(max_tokens=answer_tokens), input_text=prompt.family)
        _check(result)
        self.prefilled += result.prefilled
        trial = _trial(engine, prompt, result, len(own), restored)
        if k == 0:
            self.cold_ttft_ms = None if result.ttft_ms is None else round(parts_ms + result.ttft_ms, 1)
            if self.sharing and self.question_at:
                self.warm_ttft_ms = self._warm(own)
        return trial

    def _start(self, k: int) -> int:
        """Restore the deepest state the k-th prompt shares; how many of its tokens that holds."""
        engine = self.engine
        if self.sharing and k:
            while self.held and self.held[-1][0] > self.parts[k - 1]:
                self.held.pop()
        if not self.sharing or not self.held:
            engine.reset(keep_shared=False)  # from an empty cache: the first prompt's time is a cold one
            return 0
        point, snapshot = self.held[-1]
        t0 = time.perf_counter_ns()
        engine.restore(snapshot)
        self.snapshot_ns += time.perf_counter_ns() - t0
        return point

    def _warm(self, own: list[int]) -> float | None:
        """The first prompt again from its stable part's state: restore, question, first token."""
        snapshot = next(s for p, s in self.held if p == self.question_at)
        t0 = time.perf_counter_ns()
        self.engine.restore(snapshot)
        restore_ms = (time.perf_counter_ns() - t0) / 1e6
        result = self.engine.complete_tokens(own[self.question_at:], DecodeConfig(max_tokens=1))
        _check(result)
        return None if result.ttft_ms is None else round(restore_ms + result.ttft_ms, 1)


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


def _check(result: TurnResult) -> None:
    if result.stop_reason == "cancelled":
        raise Cancelled("task trials cancelled")


def _trial(engine: SessionEngine, prompt: TaskPrompt, result: TurnResult, prompt_tokens: int,
           restored: int) -> TaskTrial:
    answer = result.text.strip()
    report = engine.residency_report()
    return TaskTrial(
        family=prompt.family, length=prompt.length, depth=prompt.depth, seed=prompt.seed, control=prompt.control,
        prompt_tokens=prompt_tokens, answers=prompt.answers, answer=answer, score=prompt.score(answer),
        needles_resident=all(engine.residency.is_resident(*span) for span in _needle_tokens(engine, prompt)),
        evicted_tokens=report.evicted_tokens + report.cold_tokens, shared=restored, ttft_ms=result.ttft_ms,
    )


def _needle_tokens(engine: SessionEngine, prompt: TaskPrompt) -> list[tuple[int, int]]:
    """Each needle's token span, widened by one each side: SPM may merge a token across
    a needle's edge."""
    session = engine.session
    bos = session.info.facts.add_bos
    return [(max(0, len(session.tokenize(prompt.text[:start], bos)) - 1),
             len(session.tokenize(prompt.text[:end], bos)) + 1) for start, end in prompt.needles]
