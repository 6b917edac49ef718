"""aggregation: a numbered word list spread through the filler, one word listed clearly
more often than the others; the question asks for that word. No control: without the
list any word answers the question, and no shape of a value tells a made-up one."""

from __future__ import annotations

import random

from effctx_core.bench.tasks.family import Hidden, NeedleFamily
from effctx_core.bench.tasks.haystack import filler
from effctx_core.bench.tasks.values import WORDS

DISTINCT = 10
TOP = 6  # entries of the most frequent word
OTHERS = 2  # entries of every other word
INTRO = (
    "A numbered word list is hidden inside a lot of irrelevant text. "
    "Read every entry of it. I will ask you which word it lists most often.\n\n"
)


def _hide(rng: random.Random) -> Hidden:
    top, *others = rng.sample(WORDS, DISTINCT)
    listed = [top] * TOP + [word for word in others for _ in range(OTHERS)]
    rng.shuffle(listed)
    entries = tuple(f"Word list entry {i}: {word}." for i, word in enumerate(listed, 1))
    question = "\n\nWhich word does the word list list most often? The word listed most often is"
    return Hidden(entries, (), question, (top,))


AGGREGATION = NeedleFamily(
    name="aggregation", answer_tokens=8, intro=INTRO, shape=r"[a-z]+", hide=_hide, stream=filler, controlled=False
)
