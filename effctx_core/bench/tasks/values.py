"""What needles hide and name: numbers of a fixed number of digits, and common words."""

from __future__ import annotations

import random

# Concrete nouns that neither the filler nor the license texts use, so a key or a listed
# word is found only where a needle put it.
WORDS = (
    "apple", "river", "candle", "tiger", "garden", "piano", "rocket", "castle", "pepper", "violin",
    "lemon", "camera", "forest", "button", "dragon", "jacket", "ladder", "mirror", "orange", "pencil",
    "rabbit", "saddle", "tomato", "wallet", "anchor", "basket", "carpet", "cookie", "feather", "guitar",
    "hammer", "island", "kettle", "lizard", "magnet", "onion", "parrot", "pillow", "puzzle", "shovel",
    "spider", "turtle", "zebra", "banana", "bottle", "cactus", "dolphin", "eagle", "helmet", "lantern",
)


def numbers(rng: random.Random, count: int, digits: int) -> list[str]:
    """`count` distinct numbers of `digits` digits."""
    return [str(n) for n in rng.sample(range(10 ** (digits - 1), 10**digits), count)]


def shape(digits: int) -> str:
    """The shape of such a number, in an answer."""
    return rf"\d{{{digits}}}"


MAGIC_INTRO = (
    "Some special magic numbers are hidden inside a lot of irrelevant text. "
    "Find them and memorize them. I will quiz you about them.\n\n"
)
