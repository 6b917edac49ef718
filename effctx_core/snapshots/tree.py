"""The snapshot tree: every point a session has been at, as a tree of token tapes.

Pure data, no backend calls. A node's tape is always its parent's tape plus the node's
own tokens, so a branch is simply a second child of an earlier node, and the tokens two
nodes share are read off the tree instead of being compared from scratch.

Persistence (named session files, export/import) is `tree_file`'s: the tree itself is pure.
"""

from __future__ import annotations

import json
import operator
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from itertools import chain
from typing import Any, Callable, Iterator, Sequence

from effctx_core.errors import EffctxError
from effctx_core.snapshots.prefix_index import PrefixIndex

# How many materialised tapes to keep. Tapes of a long conversation grow linearly, so
# caching every node's tape would cost memory quadratic in its length; the engine only
# ever looks at a handful of nodes at a time (current, the one it restores, a diff pair).
TAPE_CACHE_SIZE = 32

TOKEN_MAX = 2**31 - 1  # tokens are stored as int32 on disk

# A node's label is its turn's first line, cut to fit a tree line beside its facts.
LABEL_CHARS = 40


class SnapshotTreeError(EffctxError):
    """An operation on the snapshot tree that cannot be done (unknown node, bad tape...)."""


class SessionFileError(EffctxError):
    """A session file that cannot be used: missing, unreadable, corrupt, foreign or too new."""


class SessionNameError(EffctxError):
    """A session name that cannot be a file name."""


@dataclass(frozen=True)
class TurnText:
    """What was said in a turn: the input and the reply, apart, so either may hold line
    breaks (a pasted document, code)."""

    input: str
    reply: str

    @property
    def label(self) -> str:
        """The input's first line, "…" where it was cut or more lines follow."""
        lines = [line.strip() for line in self.input.splitlines() if line.strip()]
        if not lines:
            return "turn"
        first = lines[0][:LABEL_CHARS]
        return first + "…" if len(lines) > 1 or len(first) < len(lines[0]) else first


@dataclass(frozen=True)
class Node:
    """One point of a session. Immutable: rename/set_blob replace the record."""

    id: str
    parent: str | None  # None only for the root
    label: str
    created: float  # seconds since the epoch
    own_tokens: tuple[int, ...]  # what this node appends to its parent's tape
    kind: str  # "prefix", "turn", "decode", "manual", "restore", ...
    identity_digest: str  # RuntimeIdentity.digest() of the runtime that made it
    # Stored as their JSON round trip (see _jsonable), so a loaded tree compares equal.
    residency: dict | None = None  # e.g. ResidencyReport.to_dict()
    metrics: dict | None = None  # ttft_ms, prefill_tps, decode_tps, reused, ...
    blob: str | None = None  # snapshot store key of the saved state, if one was saved
    turn: TurnText | None = None  # what was said, on a turn's node


@dataclass(frozen=True)
class TreeDiff:
    """How the tapes of nodes `a` and `b` differ, token by token."""

    a: str
    b: str
    ancestor: str  # deepest node both descend from (or are)
    common_prefix: int  # tokens the two tapes share from the start
    # Index of the first position where the tapes differ: common_prefix when they
    # differ (one may simply be longer), None when the tapes are equal.
    divergence: int | None
    token_a: int | None  # a's token at `divergence`, None if a's tape ends there
    token_b: int | None
    tail_a: tuple[int, ...]  # a's tape after the common prefix
    tail_b: tuple[int, ...]

    @property
    def identical(self) -> bool:
        return self.divergence is None


def _tokens(tokens: Sequence[int]) -> tuple[int, ...]:
    try:
        out = tuple(operator.index(t) for t in tokens)  # ints and numpy ints, not floats
    except TypeError:
        raise SnapshotTreeError("tokens must be integers") from None
    for t in out:
        if not 0 <= t <= TOKEN_MAX:
            raise SnapshotTreeError(f"token id {t} out of range 0..{TOKEN_MAX}")
    return out


def _jsonable(what: str, value: dict | None) -> dict | None:
    # Checked on the way in so that a later save cannot fail on a node added long ago.
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SnapshotTreeError(f"{what} must be a dict or None, not {type(value).__name__}")
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as e:
        raise SnapshotTreeError(f"{what} is not JSON-serializable: {e}") from None


class SnapshotTree:
    """A tree of session snapshots with a `current` pointer.

    The tree has at most one root: the first node added with parent None. The root
    cannot be deleted (delete its children instead, or start a new tree): a session
    keeps its prefix, and `current` then always has somewhere to fall back to.
    Ids are "n<counter>" and never reused within a tree, even after a delete, so a
    stale id held by a caller can only fail, never name another node.
    """

    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self._nodes: dict[str, Node] = {}  # insertion order: parents before children
        self._children: dict[str, list[str]] = {}
        self._length: dict[str, int] = {}  # tape length per node, without materialising it
        self._tapes: OrderedDict[str, tuple[int, ...]] = OrderedDict()  # LRU
        self._order: dict[str, int] = {}  # insertion order, for find_by_tape's ties
        self._added = 0
        # Every node's tape in the prefix index, built on the first find_by_tape and kept
        # in step after it (a child costs its own tokens: it extends its parent's chain).
        self._index: PrefixIndex[str] | None = None
        self._root: str | None = None
        self._current: str | None = None
        self._next_id = 0
        self.name: str | None = None  # session name, set by save() and load()

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def __iter__(self) -> Iterator[Node]:
        """Nodes in insertion order: every parent comes before its children."""
        return iter(list(self._nodes.values()))

    def __getitem__(self, node_id: str) -> Node:
        return self.node(node_id)

    def node(self, node_id: str) -> Node:
        try:
            return self._nodes[node_id]
        except (KeyError, TypeError):
            raise SnapshotTreeError(f"no node {node_id!r} in the snapshot tree") from None

    @property
    def root(self) -> Node | None:
        return None if self._root is None else self._nodes[self._root]

    @property
    def current(self) -> str | None:
        """Id of the node the session is at (None only while the tree is empty)."""
        return self._current

    @property
    def next_id(self) -> int:
        return self._next_id

    def children(self, node_id: str) -> list[Node]:
        self.node(node_id)
        return [self._nodes[c] for c in self._children[node_id]]

    def path(self, node_id: str) -> list[Node]:
        """The nodes from the root down to `node_id`, both included."""
        out = [self.node(node_id)]
        while out[-1].parent is not None:
            out.append(self._nodes[out[-1].parent])
        out.reverse()
        return out

    def turns(self, node_id: str, after: str | None = None) -> list[TurnText]:
        """What was said on the way from the root (or from below its ancestor `after`) down
        to `node_id`, turn by turn."""
        path = self.path(node_id)
        if after is not None:
            path = path[[node.id for node in path].index(after) + 1:]
        return [node.turn for node in path if node.turn is not None]

    def depth(self, node_id: str) -> int:
        return len(self.path(node_id)) - 1

    def tape_length(self, node_id: str) -> int:
        self.node(node_id)
        return self._length[node_id]

    def tape(self, node_id: str) -> tuple[int, ...]:
        """The full token list at `node_id`: its ancestors' own tokens and its own."""
        node = self.node(node_id)
        cached = self._tapes.get(node_id)
        if cached is not None:
            self._tapes.move_to_end(node_id)
            return cached
        # Walk up only to the nearest cached ancestor, then join once: O(tape length).
        parts = [node.own_tokens]
        up = node.parent
        base: tuple[int, ...] = ()
        while up is not None:
            hit = self._tapes.get(up)
            if hit is not None:
                base = hit
                break
            parts.append(self._nodes[up].own_tokens)
            up = self._nodes[up].parent
        out = base + tuple(chain.from_iterable(reversed(parts)))
        self._remember(node_id, out)
        return out

    def shared_with(self, tokens: Sequence[int]) -> dict[str, int]:
        """For every node, how many leading tokens of `tokens` its tape shares: one pass,
        parents first, each node comparing only its own tokens (a node whose parent
        already parted from `tokens` shares what its parent shares), so the cost is the
        tree's size, not the sum of its tapes."""
        tokens = tuple(tokens)
        shared: dict[str, int] = {}
        for node in self._nodes.values():  # parents before children
            start = 0 if node.parent is None else self._length[node.parent]
            n = start if node.parent is None else shared[node.parent]
            if n == start:
                for own, given in zip(node.own_tokens, tokens[start:]):
                    if own != given:
                        break
                    n += 1
            shared[node.id] = n
        return shared

    def shared_prefix(self, node_id: str) -> int:
        """How many tokens `node_id` shares with its parent (the parent's whole tape)."""
        node = self.node(node_id)
        return 0 if node.parent is None else self._length[node.parent]

    def common_ancestor(self, a: str, b: str) -> Node:
        on_a = {n.id for n in self.path(a)}
        for n in reversed(self.path(b)):
            if n.id in on_a:
                return n
        raise AssertionError("two nodes of one tree always share the root")

    def diff(self, a: str, b: str, *, by_tokens: bool = True) -> TreeDiff:
        """`by_tokens` False: the tapes are placeholders (a replayed tree, whose trace
        records how many tokens each node holds, not which), so the two part where the
        tree branches."""
        ancestor = self.common_ancestor(a, b)
        tape_a, tape_b = self.tape(a), self.tape(b)
        # Everything up to the ancestor's tape is shared by construction; siblings may
        # still start with the same tokens (a chat template's turn header), so go on.
        i = self._length[ancestor.id]
        limit = min(len(tape_a), len(tape_b)) if by_tokens else i
        while i < limit and tape_a[i] == tape_b[i]:
            i += 1
        same = len(tape_a) == len(tape_b) == i
        return TreeDiff(
            a=a,
            b=b,
            ancestor=ancestor.id,
            common_prefix=i,
            divergence=None if same else i,
            token_a=tape_a[i] if i < len(tape_a) else None,
            token_b=tape_b[i] if i < len(tape_b) else None,
            tail_a=tape_a[i:],
            tail_b=tape_b[i:],
        )

    def find_by_tape(self, tokens: Sequence[int], *, with_blob: bool = False) -> Node | None:
        """The node with the longest tape that is a prefix of `tokens`, or None.

        Ties (siblings adding the same tokens, nodes adding none) go to the deeper node,
        then to the one added last. With `with_blob`, only nodes that have a saved state
        count, which is what a restore needs. Through the prefix index: the cost is the
        blocks of `tokens`, not the size of the tree; each candidate's tokens are checked.
        """
        if self._root is None:
            return None
        if self._index is None:
            self._index = PrefixIndex()
            for node in self._nodes.values():
                self._index_node(node)
        tokens = tuple(tokens)
        for _, ids in self._index.candidates("", tokens):
            fits = [nid for nid in ids if (not with_blob or self._nodes[nid].blob is not None)
                    and self._holds(nid, tokens)]
            if fits:
                return self._nodes[max(fits, key=lambda nid: (self.depth(nid), self._order[nid]))]
        return None

    def _holds(self, node_id: str, tokens: tuple[int, ...]) -> bool:
        """Whether the tape of `node_id` is tokens[:its length], node by node."""
        node, end = self._nodes[node_id], self._length[node_id]
        while True:
            start = end - len(node.own_tokens)
            if tokens[start:end] != node.own_tokens:
                return False
            if node.parent is None:
                return True
            node, end = self._nodes[node.parent], start

    def blobs(self) -> set[str]:
        """Snapshot store keys referenced by live nodes: the store must keep these."""
        return {n.blob for n in self._nodes.values() if n.blob is not None}

    # ------------------------------------------------------------------ changes

    def add(
        self,
        parent_id: str | None,
        own_tokens: Sequence[int],
        kind: str,
        identity_digest: str,
        label: str = "",
        residency: dict | None = None,
        metrics: dict | None = None,
        blob: str | None = None,
        turn: TurnText | None = None,
        *,
        created: float | None = None,
        make_current: bool = True,
        node_id: str | None = None,
    ) -> Node:
        """Add a child of `parent_id` whose tape is the parent's plus `own_tokens`.

        `parent_id` None adds the root (only into an empty tree). The new node becomes
        `current` unless `make_current` is False: adding is what the session just did.
        `node_id`: the node's id when it must be one another tree gave it (a replay names
        its nodes as the recorded engine did); the next free id otherwise.
        """
        if parent_id is None:
            if self._root is not None:
                raise SnapshotTreeError(f"the snapshot tree already has a root ({self._root})")
        else:
            self.node(parent_id)
        if not isinstance(kind, str) or not kind:
            raise SnapshotTreeError("node kind must be a non-empty string")
        if not isinstance(identity_digest, str):
            raise SnapshotTreeError("identity digest must be a string")
        if not isinstance(label, str):
            raise SnapshotTreeError("node label must be a string")
        if blob is not None and (not isinstance(blob, str) or not blob):
            raise SnapshotTreeError("blob key must be a non-empty string or None")
        if turn is not None and not isinstance(turn, TurnText):
            raise SnapshotTreeError("a node's turn must be a TurnText or None")
        if node_id is not None and (not node_id or node_id in self._nodes):
            raise SnapshotTreeError(f"node id {node_id!r} is empty or taken")
        while f"n{self._next_id}" in self._nodes:  # only possible with a hand-edited file
            self._next_id += 1
        node = Node(
            id=f"n{self._next_id}" if node_id is None else node_id,
            parent=parent_id,
            label=label,
            created=self._clock() if created is None else float(created),
            own_tokens=_tokens(own_tokens),
            kind=kind,
            identity_digest=identity_digest,
            residency=_jsonable("residency", residency),
            metrics=_jsonable("metrics", metrics),
            blob=blob,
            turn=turn,
        )
        if node_id is None:
            self._next_id += 1
        self._insert(node)
        if make_current:
            self._current = node.id
        return node

    def add_tape(
        self, parent_id: str | None, full_tape: Sequence[int], kind: str, identity_digest: str, **kw: Any
    ) -> Node:
        """Like add, given the node's whole tape; it must start with the parent's tape."""
        full = tuple(full_tape)
        if parent_id is None:
            return self.add(None, full, kind, identity_digest, **kw)
        base = self.tape(parent_id)
        if full[: len(base)] != base:
            if len(full) < len(base) and base[: len(full)] == full:
                why = f"it is shorter ({len(full)} < {len(base)} tokens)"
            else:
                i = next(i for i, (x, y) in enumerate(zip(full, base)) if x != y)
                why = f"they differ at token {i} ({full[i]} != {base[i]})"
            raise SnapshotTreeError(f"tape does not extend the tape of node {parent_id}: {why}")
        return self.add(parent_id, full[len(base):], kind, identity_digest, **kw)

    def set_current(self, node_id: str) -> None:
        self.node(node_id)
        self._current = node_id

    def rename(self, node_id: str, label: str) -> Node:
        if not isinstance(label, str):
            raise SnapshotTreeError("node label must be a string")
        node = replace(self.node(node_id), label=label)
        self._nodes[node_id] = node
        return node

    def set_blob(self, node_id: str, blob: str | None) -> Node:
        """Attach (or drop, with None) the saved state of a node, e.g. saved after the fact."""
        if blob is not None and (not isinstance(blob, str) or not blob):
            raise SnapshotTreeError("blob key must be a non-empty string or None")
        node = replace(self.node(node_id), blob=blob)
        self._nodes[node_id] = node
        return node

    def delete_subtree(self, node_id: str) -> list[str]:
        """Remove a node and all its descendants; return their ids, the node first.

        The root cannot be deleted. If `current` was inside the removed subtree it moves
        to the removed node's parent: the nearest point of the session that still exists.
        """
        node = self.node(node_id)
        if node.parent is None:
            raise SnapshotTreeError("the root of a snapshot tree cannot be deleted; delete its children")
        removed: list[str] = []
        stack = [node_id]
        while stack:
            nid = stack.pop()
            removed.append(nid)
            stack.extend(reversed(self._children[nid]))
        gone = set(removed)
        self._children[node.parent].remove(node_id)
        for nid in removed:
            del self._nodes[nid], self._children[nid], self._length[nid], self._order[nid]
            self._tapes.pop(nid, None)
            if self._index is not None:
                self._index.remove(nid)
        if self._current in gone:
            self._current = node.parent
        return removed

    # ------------------------------------------------------------------ internals

    def _insert(self, node: Node) -> None:
        if node.parent is None:
            self._root = node.id
            self._length[node.id] = len(node.own_tokens)
        else:
            self._children[node.parent].append(node.id)
            self._length[node.id] = self._length[node.parent] + len(node.own_tokens)
        self._nodes[node.id] = node
        self._children[node.id] = []
        self._order[node.id] = self._added
        self._added += 1
        if self._index is not None:
            self._index_node(node)

    def _index_node(self, node: Node) -> None:
        assert self._index is not None
        if node.parent is None:
            self._index.add("", node.own_tokens, node.id)
        else:
            self._index.extend(node.parent, node.own_tokens, node.id)

    def _remember(self, node_id: str, tape: tuple[int, ...]) -> None:
        self._tapes[node_id] = tape
        self._tapes.move_to_end(node_id)
        while len(self._tapes) > TAPE_CACHE_SIZE:
            self._tapes.popitem(last=False)

    @classmethod
    def _rebuild(cls, nodes: Sequence[Node], current: str | None, next_id: int) -> "SnapshotTree":
        """A tree from already validated nodes, parents first (used by tree_file)."""
        tree = cls()
        for node in nodes:
            if node.id in tree._nodes:
                raise SnapshotTreeError(f"duplicate node id {node.id!r}")
            if node.parent is None and tree._root is not None:
                raise SnapshotTreeError(f"second root {node.id!r}")
            if node.parent is not None and node.parent not in tree._nodes:
                raise SnapshotTreeError(f"node {node.id!r} comes before its parent {node.parent!r}")
            tree._insert(node)
        if current is not None and current not in tree._nodes:
            raise SnapshotTreeError(f"current node {current!r} does not exist")
        if current is None and tree._nodes:
            raise SnapshotTreeError("no current node in a non-empty tree")
        tree._current = current
        tree._next_id = next_id
        return tree
