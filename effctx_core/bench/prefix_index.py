"""`effctx bench prefix-index`: how long "which stored state shares the longest prefix
with this prompt" takes, through the prefix index and the store's way before it.

In memory only (no store is opened or written): `states` states of one runtime identity,
as turn checkpoints of conversations (a hundred states a conversation, at distinct random
lengths up to `tokens`), each with its index record; prompts of `tokens` tokens that
share a random-length prefix with one conversation. Both ways answer every prompt and
must agree.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from typing import Callable, Sequence, TypeVar

import numpy as np

from effctx_core.snapshots.blobfile import key_from_hashes, prefix_hashes
from effctx_core.snapshots.index import IndexRecord
from effctx_core.snapshots.prefix_index import DEFAULT_BLOCK_SIZE
from effctx_core.snapshots.stored_prefixes import StoredPrefixes
from effctx_core.units import ms_since

STATES_PER_CONVERSATION = 100
VOCABULARY = 262_144
IDENTITY = hashlib.sha256(b"effctx bench prefix-index").hexdigest()

ByLength = dict[int, dict[str, str]]
T = TypeVar("T")


def by_stored_length(entries: dict[str, IndexRecord]) -> ByLength:
    """The old in-memory index: token count -> token hash -> key (one identity)."""
    out: ByLength = {}
    for key, r in entries.items():
        out.setdefault(r.n_tokens, {})[r.token_hash] = key
    return out


def stored_lengths_lookup(by_length: ByLength, tokens: Sequence[int]) -> tuple[str, int] | None:
    """SnapshotStore.longest_prefix before the prefix index: the prompt's hash at every
    stored length, longest first (one pass over the tokens, one digest per length)."""
    lengths = [n for n in by_length if 1 <= n <= len(tokens)]
    if not lengths:
        return None
    hashes = prefix_hashes(tokens[: max(lengths)], lengths)
    for n in sorted(lengths, reverse=True):
        key = by_length[n].get(hashes[n])
        if key is not None:
            return key, n
    return None


def _timed(fn: Callable[..., T], *args: object) -> tuple[T, float]:
    t0 = time.perf_counter_ns()
    out = fn(*args)
    return out, ms_since(t0)


def _summary(times: list[float]) -> dict:
    times = sorted(times)
    return {"median_ms": round(statistics.median(times), 3), "p95_ms": round(times[int(0.95 * (len(times) - 1))], 3)}


def run_prefix_index_benchmark(states: int = 10_000, tokens: int = 32_768, lookups: int = 100,
                               block_size: int = DEFAULT_BLOCK_SIZE, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    conversations = max(1, -(-states // STATES_PER_CONVERSATION))
    texts = [rng.integers(0, VOCABULARY, tokens, dtype="<i4") for _ in range(conversations)]
    as_lists = [t.tolist() for t in texts]
    entries: dict[str, IndexRecord] = {}
    where: dict[str, tuple[int, int]] = {}
    for c in range(conversations):
        count = min(STATES_PER_CONVERSATION, states - c * STATES_PER_CONVERSATION, tokens)
        raw = texts[c].tobytes()
        for n in sorted(rng.choice(tokens, size=count, replace=False) + 1):
            token_hash = hashlib.sha256(raw[: 4 * int(n)]).hexdigest()
            key = key_from_hashes(IDENTITY, token_hash)
            entries[key] = IndexRecord(IDENTITY, int(n), token_hash, 0, 0.0, 0.0, len(entries) + 1, {})
            where[key] = (c, int(n))

    prefixes = StoredPrefixes(lambda key: tuple(as_lists[where[key][0]][: where[key][1]]), block_size)
    _, build_ms = _timed(prefixes.longest, IDENTITY, (), entries)  # the first lookup builds it
    by_length = by_stored_length(entries)

    new_times, old_times, agree = [], [], True
    for _ in range(lookups):
        c = int(rng.integers(conversations))
        cut = int(rng.integers(0, tokens + 1))
        prompt = as_lists[c][:cut] + rng.integers(0, VOCABULARY, tokens - cut).tolist()
        new, new_ms = _timed(prefixes.longest, IDENTITY, prompt, entries)
        old, old_ms = _timed(stored_lengths_lookup, by_length, prompt)
        new_times.append(new_ms)
        old_times.append(old_ms)
        agree = agree and (None if new is None else (new.value, new.n_tokens)) == old
    index_figures, old_figures = _summary(new_times), _summary(old_times)
    return {
        "states": len(entries),
        "conversations": conversations,
        "tokens": tokens,
        "block_size": block_size,
        "lookups": lookups,
        "build_ms": round(build_ms, 1),
        "links": prefixes.index.links(),
        "prefix_index": index_figures,
        "stored_lengths": {**old_figures, "distinct_lengths": len(by_length)},
        "speedup": round(old_figures["median_ms"] / max(index_figures["median_ms"], 1e-6), 1),
        "agree": agree,
    }
