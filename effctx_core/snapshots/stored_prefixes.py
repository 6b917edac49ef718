"""The store's prefix index: its entries' token lists, one space per runtime identity.

index.json holds no token lists (only each entry's token count and sha256), so an
identity's part is built on its first lookup from its blobs' token sections (header and
tokens read and checked; 4 bytes a token, a small part of a blob beside its state), and
kept in step with the index after that: only entries that appear or go are read or
dropped. An entry this process puts is added from the tokens in hand. A blob whose tokens
cannot be read is left out (a lookup never returns it) until its record changes.

A candidate of the hash walk is trusted only when the sha256 of the prompt's first n
tokens is the entry's token hash: the same content address `find` trusts.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Callable, Mapping, Sequence

import numpy as np

from effctx_core.snapshots.index import IndexRecord
from effctx_core.snapshots.prefix_index import DEFAULT_BLOCK_SIZE, PrefixIndex, PrefixMatch


def prefix_token_hash(tokens: tuple, n: int) -> str | None:
    """token_hash(tokens[:n]) (sha256 of int32 LE); None when they are not int32 ids."""
    try:
        raw = struct.pack(f"<{n}i", *tokens[:n])
    except (struct.error, TypeError):
        return None
    return hashlib.sha256(raw).hexdigest()


class StoredPrefixes:
    def __init__(self, tokens_of: Callable[[str], tuple[int, ...] | None], block_size: int = DEFAULT_BLOCK_SIZE):
        self._tokens_of = tokens_of
        self.index: PrefixIndex[str] = PrefixIndex(block_size)
        self._identities: set[str] = set()  # the spaces built so far
        self._unreadable: dict[str, IndexRecord] = {}  # key -> its record when its tokens could not be read
        self._synced: Mapping[str, IndexRecord] | None = None

    def longest(self, identity: str, tokens: Sequence[int], entries: Mapping[str, IndexRecord]) -> PrefixMatch[str] | None:
        """(key, n) of the entry of `identity` holding the longest prefix tokens[:n], n >= 1."""
        self._sync(entries, identity)
        toks = tokens if isinstance(tokens, tuple) else tuple(tokens)

        def verify(key: str, n: int) -> bool:
            record = entries.get(key)
            return record is not None and record.n_tokens == n and prefix_token_hash(toks, n) == record.token_hash

        return self.index.longest(identity, toks, verify, min_tokens=1)

    def added(self, key: str, record: IndexRecord, raw_tokens: bytes) -> None:
        """An entry this process just put: no blob read needed."""
        if record.identity in self._identities:
            self._unreadable.pop(key, None)
            self.index.add(record.identity, tuple(np.frombuffer(raw_tokens, dtype="<i4").tolist()), key)

    def _sync(self, entries: Mapping[str, IndexRecord], identity: str) -> None:
        if identity not in self._identities:
            self._identities.add(identity)
            for key, record in entries.items():
                if record.identity == identity:
                    self._add(key, record)
        if entries is self._synced:
            return
        for key in [k for k in self.index if k not in entries]:
            self.index.remove(key)
        for key, record in list(self._unreadable.items()):
            if entries.get(key) != record:
                del self._unreadable[key]
        for key, record in entries.items():
            if record.identity in self._identities and key not in self.index and key not in self._unreadable:
                self._add(key, record)
        self._synced = entries

    def _add(self, key: str, record: IndexRecord) -> None:
        tokens = self._tokens_of(key)
        if tokens is None or len(tokens) != record.n_tokens:
            self._unreadable[key] = record
        else:
            self.index.add(record.identity, tokens, key)
