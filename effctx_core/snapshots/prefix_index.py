"""The prefix index: which stored token list shares the longest prefix with a prompt.

A stored token list is cut into blocks of `block_size` tokens. Every full block is a link
of a hash chain (its hash covers the previous link's hash and its own tokens, as in vLLM's
prefix caching), so a prompt's chain is walked block by block from its start and the walk
stops at the first link nothing stored: it costs the prompt's blocks, however many lists
are stored. A list whose length is no block multiple ends in a partial block, its *tail*,
kept exactly (as tokens) at the link of its last full block; after the walk the tails at
the links reached are tried from the deepest link up, longest tail first, so candidates
come longest first.

A chain hash can collide, and a hash walk alone would then name a list that only hashes
like the prompt. So nothing is trusted until checked against the tokens: `longest` takes
the owner's `verify(value, n)`, which holds the real tokens (the store: the sha256 of the
entry's tokens, its content address; the snapshot tree: its nodes' tokens). A collision
between links under different parents is also caught when it happens (a link whose
recorded parent is not the link the walk came from): such a list is left out of the chain
(a miss, never a wrong answer) and the walk stops there.

Spaces (runtime identities in the store) are kept apart: each has its own chain. Pure and
in memory; nothing here reads a file. Removing a list takes its value alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, Hashable, Iterator, NamedTuple, Sequence, TypeVar

V = TypeVar("V", bound=Hashable)

DEFAULT_BLOCK_SIZE = 64  # 512 links for a 32k-token prompt; at most 63 tail lengths a link


def chain_hash(parent: int, block: tuple[int, ...]) -> int:
    """The link of `block` after the link `parent`: Python's 64-bit tuple hash."""
    return hash((parent, block))


class PrefixMatch(NamedTuple, Generic[V]):
    value: V
    n_tokens: int


class _Link:
    """A full block of some stored prefix: the chain up to here, and the lists ending in
    the block after it (their tails)."""

    __slots__ = ("hash", "parent", "depth", "count", "ends", "tail_lengths")

    def __init__(self, h: int, parent: _Link | None, depth: int):
        self.hash = h
        self.parent = parent
        self.depth = depth  # full blocks up to and including this one
        self.count = 0  # stored lists whose prefix holds this link
        self.ends: dict[tuple[int, ...], list] | None = None  # tail -> values, oldest first
        self.tail_lengths: dict[int, int] | None = None  # tail length -> distinct tails of it


class _Space:
    __slots__ = ("root", "links")

    def __init__(self) -> None:
        self.root = _Link(0, None, 0)
        self.links: dict[int, _Link] = {}


@dataclass(frozen=True)
class _Entry:
    space: str
    link: _Link | None  # None: left out of the chain (a collision with a link of another prefix)
    tail: tuple[int, ...]
    n_tokens: int


class PrefixIndex(Generic[V]):
    def __init__(self, block_size: int = DEFAULT_BLOCK_SIZE,
                 block_hash: Callable[[int, tuple[int, ...]], int] = chain_hash):
        if block_size < 1:
            raise ValueError("block_size must be at least 1")
        self.block_size = block_size
        self._hash = block_hash
        self._spaces: dict[str, _Space] = {}
        self._entries: dict[V, _Entry] = {}

    # ----------------------------------------------------------------- queries

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, value: object) -> bool:
        return value in self._entries

    def __iter__(self) -> Iterator[V]:
        """The values indexed (a copy: the index may change while it is walked)."""
        return iter(list(self._entries))

    def n_tokens(self, value: V) -> int:
        return self._entries[value].n_tokens

    def links(self) -> int:
        """How many distinct full blocks the index holds (its size, beside the tails)."""
        return sum(len(space.links) for space in self._spaces.values())

    def candidates(self, space: str, tokens: Sequence[int]) -> Iterator[tuple[int, tuple[V, ...]]]:
        """(n, values) of stored lists that may be tokens[:n], longest first, NOT verified:
        the full blocks matched by chain hash, the tail by its tokens."""
        found = self._spaces.get(space)
        if found is None:
            return
        toks = tokens if isinstance(tokens, tuple) else tuple(tokens)
        size, links, block_hash = self.block_size, found.links, self._hash
        link, pos = found.root, 0
        while pos + size <= len(toks):
            nxt = links.get(block_hash(link.hash, toks[pos:pos + size]))
            if nxt is None or nxt.parent is not link:
                break
            link, pos = nxt, pos + size
        at: _Link | None = link
        while at is not None:
            if at.ends is not None and at.tail_lengths is not None:
                start = at.depth * size
                room = len(toks) - start
                for r in sorted(at.tail_lengths, reverse=True):
                    if r <= room:
                        values = at.ends.get(toks[start:start + r])
                        if values:
                            yield start + r, tuple(values)
            at = at.parent

    def longest(self, space: str, tokens: Sequence[int], verify: Callable[[V, int], bool],
                accept: Callable[[V], bool] | None = None, min_tokens: int = 0) -> PrefixMatch[V] | None:
        """The stored list with the longest prefix tokens[:n] (n >= min_tokens) that `verify`
        confirms holds exactly those tokens (and `accept` takes, when given)."""
        toks = tokens if isinstance(tokens, tuple) else tuple(tokens)
        for n, values in self.candidates(space, toks):
            if n < min_tokens:
                return None
            for value in values:
                if (accept is None or accept(value)) and verify(value, n):
                    return PrefixMatch(value, n)
        return None

    # ----------------------------------------------------------------- changes

    def add(self, space: str, tokens: Sequence[int], value: V) -> None:
        """Index `value` as holding `tokens` in `space` (replacing what it held before)."""
        if value in self._entries:
            self.remove(value)
        target = self._spaces.get(space)
        if target is None:
            target = self._spaces[space] = _Space()
        toks = tokens if isinstance(tokens, tuple) else tuple(tokens)
        self._attach(space, target, target.root, toks, len(toks), value)

    def extend(self, parent: V, own_tokens: Sequence[int], value: V) -> None:
        """Index `value` as holding the tokens of `parent` plus `own_tokens` (in its space),
        at the cost of `own_tokens` alone: how a tree adds a child."""
        base = self._entries[parent]
        if value in self._entries:
            self.remove(value)
        own = tuple(own_tokens)
        if base.link is None:  # the parent is out of the chain: so is everything after it
            self._entries[value] = _Entry(base.space, None, (), base.n_tokens + len(own))
            return
        target = self._spaces[base.space]
        self._attach(base.space, target, base.link, base.tail + own, base.n_tokens + len(own), value)

    def remove(self, value: V) -> None:
        entry = self._entries.pop(value, None)
        if entry is None or entry.link is None:
            return
        link = entry.link
        assert link.ends is not None and link.tail_lengths is not None
        holders = link.ends[entry.tail]
        holders.remove(value)
        if not holders:
            del link.ends[entry.tail]
            r = len(entry.tail)
            link.tail_lengths[r] -= 1
            if not link.tail_lengths[r]:
                del link.tail_lengths[r]
            if not link.ends:
                link.ends = link.tail_lengths = None
        target = self._spaces[entry.space]
        at: _Link | None = link
        while at is not None:
            at.count -= 1
            if at.count == 0 and at.parent is not None:
                del target.links[at.hash]
            at = at.parent
        if target.root.count == 0:
            del self._spaces[entry.space]

    # ----------------------------------------------------------------- internals

    def _attach(self, space: str, target: _Space, start: _Link, pending: tuple[int, ...], n_tokens: int,
                value: V) -> None:
        """Chain the full blocks of `pending` after `start`, then hang its tail there."""
        size, links = self.block_size, target.links
        made: list[_Link] = []
        link, pos = start, 0
        while pos + size <= len(pending):
            h = self._hash(link.hash, pending[pos:pos + size])
            nxt = links.get(h)
            if nxt is None:
                nxt = links[h] = _Link(h, link, link.depth + 1)
                made.append(nxt)
            elif nxt.parent is not link:  # another prefix owns this hash: stay out of the chain
                for fresh in made:
                    del links[fresh.hash]
                self._entries[value] = _Entry(space, None, (), n_tokens)
                if target.root.count == 0:
                    del self._spaces[space]
                return
            link, pos = nxt, pos + size
        tail = pending[pos:]
        if link.ends is None or link.tail_lengths is None:
            link.ends, link.tail_lengths = {}, {}
        holders = link.ends.get(tail)
        if holders is None:
            holders = link.ends[tail] = []
            link.tail_lengths[len(tail)] = link.tail_lengths.get(len(tail), 0) + 1
        holders.append(value)
        at: _Link | None = link
        while at is not None:
            at.count += 1
            at = at.parent
        self._entries[value] = _Entry(space, link, tail, n_tokens)
