"""Prompts for benchmarks and quality smokes: filler text and the passkey retrieval task."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

Tokenize = Callable[[str, bool], list[int]]

FILLER_SENTENCE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
PASSKEY_INTRO = (
    "There is an important info hidden inside a lot of irrelevant text. "
    "Find it and memorize it. I will quiz you about the important information there.\n\n"
)
PASSKEY_QUESTION = "\n\nWhat is the pass key? The pass key is"


def passkey_needle(key: str) -> str:
    """The sentences that hide a pass key (the passkey task family says it the same way)."""
    return f"The pass key is {key}. Remember it. {key} is the pass key."


def filler_text(tokenize: Tokenize, n_tokens: int) -> str:
    """About n_tokens tokens of repetitive filler."""
    per = max(1, len(tokenize(FILLER_SENTENCE, False)))
    return FILLER_SENTENCE * max(1, n_tokens // per)


@dataclass(frozen=True)
class PasskeyPrompt:
    text: str
    key: str
    depth: float
    needle: str


def passkey_prompt(tokenize: Tokenize, n_tokens: int, depth: float, seed: int) -> PasskeyPrompt:
    """A 5-digit key hidden at `depth` (0..1) of about n_tokens tokens of filler.

    The default model found 13 of 13 keys in this wording at 0.5k-4k tokens.
    """
    key = str(random.Random(seed).randint(10000, 99999))
    needle = f" {passkey_needle(key)} "
    overhead = len(tokenize(PASSKEY_INTRO + needle + PASSKEY_QUESTION, False))
    sentences = filler_text(tokenize, max(0, n_tokens - overhead)).split(". ")
    cut = int(len(sentences) * depth)
    before = ". ".join(sentences[:cut]) + (". " if cut else "")
    after = ". ".join(sentences[cut:])
    return PasskeyPrompt(PASSKEY_INTRO + before + needle + after + PASSKEY_QUESTION, key, depth, needle)
