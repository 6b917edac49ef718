"""passkey: a 5-digit key in the repeated filler, in the wording of the passkey smoke
(bench/prompts.py), so that their results compare; each trial has a key of its own."""

from __future__ import annotations

import random

from effctx_core.bench.prompts import PASSKEY_INTRO, PASSKEY_QUESTION, passkey_needle
from effctx_core.bench.tasks.family import Hidden, NeedleFamily
from effctx_core.bench.tasks.haystack import filler
from effctx_core.bench.tasks.values import numbers, shape


def _hide(rng: random.Random) -> Hidden:
    key = numbers(rng, 1, 5)[0]
    return Hidden((passkey_needle(key),), (), PASSKEY_QUESTION, (key,))


PASSKEY = NeedleFamily(name="passkey", answer_tokens=16, intro=PASSKEY_INTRO, shape=shape(5), hide=_hide, stream=filler)
