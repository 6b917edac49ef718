"""multivalue: one word has several magic numbers, each in a needle of its own, and the
question asks for all of them (the score is the fraction found)."""

from __future__ import annotations

import random

from effctx_core.bench.tasks.family import Hidden, NeedleFamily
from effctx_core.bench.tasks.haystack import filler
from effctx_core.bench.tasks.values import MAGIC_INTRO, WORDS, numbers, shape

VALUES = 4
DIGITS = 7


def _hide(rng: random.Random) -> Hidden:
    word = rng.choice(WORDS)
    values = numbers(rng, VALUES, DIGITS)
    needles = tuple(f"One of the special magic numbers for {word} is: {value}." for value in values)
    question = f"\n\nWhat are all the special magic numbers for {word}? The special magic numbers for {word} are"
    return Hidden(needles, (), question, tuple(values))


# Room for the four 7-digit values (a digit is a token of the default model) and what separates them.
MULTIVALUE = NeedleFamily(
    name="multivalue", answer_tokens=48, intro=MAGIC_INTRO, shape=shape(DIGITS), hide=_hide, stream=filler
)
