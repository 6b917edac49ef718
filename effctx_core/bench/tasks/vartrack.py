"""vartrack: a value passed along a chain of variables ("VAR B = VAR A."), the question
asks for the last variable's value. No control, as in RULER."""

from __future__ import annotations

import random
import string

from effctx_core.bench.tasks.family import Hidden, NeedleFamily
from effctx_core.bench.tasks.haystack import filler
from effctx_core.bench.tasks.values import numbers, shape

HOPS = 4  # as RULER: four assignments after the value's
DIGITS = 5
INTRO = "Memorize and track the chain of variable assignments hidden in the following text.\n\n"


def _names(rng: random.Random, count: int) -> list[str]:
    """`count` distinct names of five capital letters, as RULER's."""
    names: list[str] = []
    while len(names) < count:
        name = "".join(rng.choices(string.ascii_uppercase, k=5))
        if name not in names:
            names.append(name)
    return names


def _hide(rng: random.Random) -> Hidden:
    names = _names(rng, HOPS + 1)
    value = numbers(rng, 1, DIGITS)[0]
    chain = (f"VAR {names[0]} = {value}.", *(f"VAR {name} = VAR {before}." for before, name in zip(names, names[1:])))
    last = names[-1]
    return Hidden(chain, (), f"\n\nWhat is the value of VAR {last}? The value of VAR {last} is", (value,))


VARTRACK = NeedleFamily(
    name="vartrack", answer_tokens=16, intro=INTRO, shape=shape(DIGITS), hide=_hide, stream=filler, controlled=False
)
