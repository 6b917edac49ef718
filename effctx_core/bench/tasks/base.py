"""What every task family makes: a prompt, where its needles lie, and how to score an answer."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable, Protocol

Tokenize = Callable[[str, bool], list[int]]

_SPACE = re.compile(r"\s+")


def normalized(text: str) -> str:
    """Case and runs of white space do not count in a match."""
    return _SPACE.sub(" ", text).strip().lower()


def trial_rng(family: str, length: int, depth: float, seed: int) -> random.Random:
    """The trial's own random source: every trial hides its own values, and the same
    trial hides the same ones on every run (a str seed is hashed with SHA-512)."""
    return random.Random(f"{family}:{length}:{depth:.4f}:{seed}")


@dataclass(frozen=True)
class TaskPrompt:
    family: str
    length: int  # the target prompt length, tokens
    depth: float  # where the first needle sits, 0..1 of the haystack
    seed: int
    text: str  # the whole prompt, as the model reads it
    needles: tuple[tuple[int, int], ...]  # character spans of `text` the answer depends on
    answers: tuple[str, ...]  # the values a right answer holds; none for a control
    shape: str  # a regular expression of one value: an answer to a control that holds one made it up
    question: str = ""  # the text's end that asks: what a warm start prefills after the stable part

    @property
    def stable(self) -> str:
        """The part a client would keep from one question to the next: all but the question."""
        return self.text[: len(self.text) - len(self.question)]

    @property
    def control(self) -> bool:
        """No needle: nothing to find."""
        return not self.answers

    def score(self, answer: str) -> float:
        """The fraction of the values the answer holds (RULER's match-all): 1.0 or 0.0
        for a one-value task. A control scores 1.0 when the answer holds no value."""
        said = normalized(answer)
        if self.control:
            return 0.0 if re.search(self.shape, said) else 1.0
        return sum(normalized(a) in said for a in self.answers) / len(self.answers)


class TaskFamily(Protocol):
    name: str
    answer_tokens: int  # how many tokens an answer may take

    def prompt(self, tokenize: Tokenize, length: int, depth: float, seed: int) -> TaskPrompt:
        """A prompt of about `length` tokens, its (first) needle at `depth`."""
        ...

    def control(self, tokenize: Tokenize, length: int, seed: int) -> TaskPrompt | None:
        """The same haystack and question with no needle, or None where a control means nothing."""
        ...
