"""A task family built the common way: a fixed intro, a haystack that is the same for
every trial at one length, a trial's needles placed in it from the trial's depth on, and
its question at the end."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Iterator

from effctx_core.bench.tasks.base import TaskPrompt, Tokenize, trial_rng
from effctx_core.bench.tasks.placing import Haystack, count, fit, place


@dataclass(frozen=True)
class Hidden:
    """What one trial hides and asks."""

    needles: tuple[str, ...]  # what the answer depends on, in the text's order
    distractors: tuple[str, ...]  # alike, but the answer depends on none of them
    question: str  # ends where the model starts writing the answer
    answers: tuple[str, ...]


@dataclass  # not frozen: TaskFamily's name and answer_tokens are plain (settable) attributes
class NeedleFamily:
    name: str
    answer_tokens: int
    intro: str
    shape: str  # one value, as TaskPrompt.shape
    hide: Callable[[random.Random], Hidden]  # a trial's needles and question, from its rng
    stream: Callable[[], Iterator[str]]  # a new stream of the haystack's sentences (haystack.py)
    controlled: bool = True  # False: the family has no control

    def prompt(self, tokenize: Tokenize, length: int, depth: float, seed: int) -> TaskPrompt:
        rng = trial_rng(self.name, length, depth, seed)
        hidden = self.hide(rng)
        pieces = hidden.needles + hidden.distractors
        # The first needle at the trial's depth, the others anywhere behind it: every
        # trial shares its text up to its depth with the trials that go deeper.
        depths = [depth, *sorted(rng.uniform(depth, 1.0) for _ in pieces[1:])]
        haystack = self._haystack(tokenize, length, needled=True)
        body, spans = place(haystack, pieces, [haystack.cut(d) for d in depths])
        shift = len(self.intro)
        needles = tuple((start + shift, end + shift) for start, end in spans[: len(hidden.needles)])
        text = self.intro + body + hidden.question
        return TaskPrompt(self.name, length, depth, seed, text, needles, hidden.answers, self.shape, hidden.question)

    def control(self, tokenize: Tokenize, length: int, seed: int) -> TaskPrompt | None:
        """The haystack up to the question, which asks for a value nowhere in it. Its depth
        is 1.0: like a trial's whose needles lie at the end, its text before the question
        is all haystack."""
        if not self.controlled:
            return None
        hidden = self.hide(trial_rng(f"{self.name}/control", length, 1.0, seed))
        body, _ = place(self._haystack(tokenize, length, needled=False), (), ())
        return TaskPrompt(self.name, length, 1.0, seed, self.intro + body + hidden.question, (), (), self.shape,
                          hidden.question)

    def _haystack(self, tokenize: Tokenize, length: int, needled: bool) -> Haystack:
        """What is left of `length` for the haystack. The budget counts a reference trial's
        needles and question, not this trial's, whose values may take a token more or less:
        the haystack stays the same for every trial at `length`."""
        reference = self.hide(random.Random(f"{self.name}:reference"))
        pieces = reference.needles + reference.distractors if needled else ()
        # A needle in the text has white space before it.
        needles = sum(count(tokenize, " " + piece) for piece in pieces)
        overhead = count(tokenize, self.intro) + count(tokenize, reference.question) + needles
        return fit(tokenize, self.stream(), length - overhead)
