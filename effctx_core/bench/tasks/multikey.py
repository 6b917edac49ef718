"""multikey and multikey-text: several magic numbers, each for its own word, and the
question asks for the first one's (the others are distractors); in the filler, or in
natural text."""

from __future__ import annotations

import random

from effctx_core.bench.tasks.family import Hidden, NeedleFamily
from effctx_core.bench.tasks.haystack import filler, natural_text
from effctx_core.bench.tasks.values import MAGIC_INTRO, WORDS, numbers, shape

KEYS = 4  # the asked one and three distractors
DIGITS = 7


def _hide(rng: random.Random) -> Hidden:
    words = rng.sample(WORDS, KEYS)
    values = numbers(rng, KEYS, DIGITS)
    needles = [f"The special magic number for {word} is: {value}." for word, value in zip(words, values)]
    asked = words[0]
    question = f"\n\nWhat is the special magic number for {asked}? The special magic number for {asked} is"
    return Hidden((needles[0],), tuple(needles[1:]), question, (values[0],))


MULTIKEY = NeedleFamily(
    name="multikey", answer_tokens=16, intro=MAGIC_INTRO, shape=shape(DIGITS), hide=_hide, stream=filler
)
MULTIKEY_TEXT = NeedleFamily(
    name="multikey-text", answer_tokens=16, intro=MAGIC_INTRO, shape=shape(DIGITS), hide=_hide, stream=natural_text
)
