"""The texts needles hide in, as endless streams of sentences: the passkey's filler, or
natural text (the license texts every Debian system ships).

A sentence carries the white space before it (the stream's first one has none): counted
that way, the tokens of a run of sentences are the sum of theirs, and a needle can go
between any two of them.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Iterable, Iterator

from effctx_core.bench.prompts import FILLER_SENTENCE
from effctx_core.errors import EffctxError

LICENSES = Path("/usr/share/common-licenses")
# GPL-3 first (the quality NLL's reference text), then the other texts of Debian's
# base-files, 37k tokens of the default model in all; the near-copies of these (GPL-1,
# LGPL-2, GFDL-1.2, and LGPL-3, an addendum to GPL-3) are left out so the text does not
# repeat itself before its end. A longer haystack starts over from GPL-3.
LICENSE_ORDER = (
    "GPL-3", "GPL-2", "LGPL-2.1", "GFDL-1.3", "MPL-1.1", "MPL-2.0", "Apache-2.0", "CC0-1.0", "Artistic", "BSD",
)

# After a word's full stop (not "1." of a numbered section), or before a blank line.
_BOUNDARY = re.compile(r"(?<=[a-z)\]\"'][.!?])(?=\s)|(?<=\S)(?=\n[ \t]*\n)")


def sentences(text: str) -> list[str]:
    """`text` cut before the white space that follows each sentence or paragraph."""
    return _BOUNDARY.split(text.strip())


def _stream(texts: Iterable[str], joint: str) -> Iterator[str]:
    """The texts' sentences one after another, each text joined to the last by `joint`."""
    for i, text in enumerate(texts):
        first, *rest = sentences(text)
        yield (joint if i else "") + first
        yield from rest


def filler() -> Iterator[str]:
    """The passkey's filler, repeated without end."""
    return _stream(itertools.repeat(FILLER_SENTENCE), " ")


def _license(name: str) -> str:
    path = LICENSES / name
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise EffctxError(
            f"cannot read {path} ({exc.strerror}): the natural-text tasks hide their needles in Debian's license texts"
        ) from exc


def natural_text() -> Iterator[str]:
    """Debian's license texts in LICENSE_ORDER, paragraph breaks kept, without end.
    A file is read when the stream reaches it."""
    return _stream(map(_license, itertools.cycle(LICENSE_ORDER)), "\n\n")
