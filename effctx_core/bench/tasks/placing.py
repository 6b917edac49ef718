"""A haystack of a given number of tokens, cut from a stream of sentences, and needles
placed in it at depths (fractions of its tokens)."""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from typing import Iterator, Sequence

from effctx_core.bench.tasks.base import Tokenize

_WORD = re.compile(r"\s*\S+")


def count(tokenize: Tokenize, text: str) -> int:
    """Tokens of `text` inside a prompt (no BOS)."""
    return len(tokenize(text, False))


def _lead(text: str) -> str:
    return text[: len(text) - len(text.lstrip())]


@dataclass(frozen=True)
class Haystack:
    units: tuple[str, ...]  # sentences from the stream's start; the last may end early, at a word
    bounds: tuple[int, ...]  # bounds[i]: the tokens of units[:i]; one more entry than units
    after: str  # the white space the stream goes on with after the last unit

    @property
    def tokens(self) -> int:
        return self.bounds[-1]

    def cut(self, depth: float) -> int:
        """The boundary between sentences nearest to `depth` of the haystack's tokens."""
        target = depth * self.tokens
        i = min(bisect_left(self.bounds, target), len(self.bounds) - 1)
        return i - 1 if i and target - self.bounds[i - 1] <= self.bounds[i] - target else i


def fit(tokenize: Tokenize, stream: Iterator[str], budget: int) -> Haystack:
    """The stream's first `budget` tokens, or a word's tokens fewer: a haystack's size does
    not hang on where its text's sentences end (one of GPL-3's takes 157 tokens). The
    same stream and budget give the same haystack, and a larger budget one that starts
    with it."""
    units: list[str] = []
    bounds = [0]
    known: dict[str, int] = {}  # the filler repeats five sentences
    while True:
        unit = next(stream)
        if unit not in known:
            known[unit] = count(tokenize, unit)
        room = budget - bounds[-1]
        if known[unit] <= room:
            units.append(unit)
            bounds.append(bounds[-1] + known[unit])
            continue
        words = _WORD.findall(unit)
        taken, size = _words_within(tokenize, words, room)
        if taken:
            units.append("".join(words[:taken]))
            bounds.append(bounds[-1] + size)
        return Haystack(tuple(units), tuple(bounds), _lead(words[taken]) or " ")


def _words_within(tokenize: Tokenize, words: list[str], room: int) -> tuple[int, int]:
    """How many of a sentence's leading words take at most `room` tokens (fewer than all
    of them do), and their tokens."""
    low, high, size = 0, len(words) - 1, 0
    while low < high:
        middle = (low + high + 1) // 2
        tokens = count(tokenize, "".join(words[:middle]))
        if tokens <= room:
            low, size = middle, tokens
        else:
            high = middle - 1
    return low, size


def place(haystack: Haystack, needles: Sequence[str], cuts: Sequence[int]) -> tuple[str, tuple[tuple[int, int], ...]]:
    """The haystack's text with needles[i] at the boundary cuts[i] (cuts in the needles'
    order, never decreasing), and the span of each needle in it.

    A needle takes the white space of what follows it (a paragraph break stays a paragraph
    break), so the text before a needle is the haystack's own text up to that boundary:
    the same as in every prompt whose needles lie deeper.
    """
    parts: list[str] = []
    size = 0
    spans: list[tuple[int, int]] = []
    for boundary, follower in enumerate((*haystack.units, haystack.after)):
        while len(spans) < len(needles) and cuts[len(spans)] == boundary:
            separator = (_lead(follower) or " ") if parts else ""
            needle = needles[len(spans)]
            parts += [separator, needle]
            spans.append((size + len(separator), size + len(separator) + len(needle)))
            size += len(separator) + len(needle)
        if boundary < len(haystack.units):
            # Only the stream's first sentence has no white space before it.
            unit = follower if not parts or _lead(follower) else " " + follower
            parts.append(unit)
            size += len(unit)
    return "".join(parts), tuple(spans)
