"""The store's two small JSON files: the entry index and the refs of saved snapshot trees.

The index is a cache of what the blob headers say plus usage (last use, an LRU clock);
it can be rebuilt from the blobs, so a damaged index costs only usage history. The refs
cannot be rebuilt: they live in their own file so that damage to one never takes the
other with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from effctx_core.snapshots.blobfile import BlobHeader, is_digest, key_from_hashes

INDEX_FORMAT = 1
REFS_FORMAT = 1

_RECORD_TYPES: dict[str, type | tuple[type, ...]] = {
    "identity": str, "n_tokens": int, "token_hash": str, "bytes": int,
    "created": (int, float), "last_used": (int, float), "use": int, "meta": dict,
}


@dataclass
class IndexData:
    clock: int = 0  # logical LRU clock: wall clocks jump and tie, this does not
    entries: dict[str, dict] = field(default_factory=dict)

    def total_bytes(self, skip: str | None = None) -> int:
        return sum(r["bytes"] for k, r in self.entries.items() if k != skip)

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def to_bytes(self) -> bytes:
        data = {"format": INDEX_FORMAT, "clock": self.clock, "entries": self.entries}
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> "IndexData":
        """Raises ValueError if the file is not an index this code wrote."""
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT:
            raise ValueError("unknown index format")
        clock, entries = data.get("clock"), data.get("entries")
        if not isinstance(clock, int) or not isinstance(entries, dict):
            raise ValueError("index fields missing")
        for key, record in entries.items():
            _check_record(key, record)
        return cls(clock, entries)

    def prefix_map(self) -> dict[str, dict[int, dict[str, str]]]:
        """identity -> token count -> token hash -> key: what longest_prefix walks."""
        out: dict[str, dict[int, dict[str, str]]] = {}
        for key, r in self.entries.items():
            out.setdefault(r["identity"], {}).setdefault(r["n_tokens"], {})[r["token_hash"]] = key
        return out


def make_record(header: BlobHeader, meta: dict, file_bytes: int, created: float, last_used: float, use: int) -> dict:
    return {
        "identity": header.identity, "n_tokens": header.n_tokens, "token_hash": header.token_hash,
        "bytes": file_bytes, "created": created, "last_used": last_used, "use": use, "meta": meta,
    }


def _check_record(key: str, record: object) -> None:
    if not is_digest(key) or not isinstance(record, dict):
        raise ValueError("bad entry")
    for name, kind in _RECORD_TYPES.items():
        value = record.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"bad entry field {name}")
    if not is_digest(record["identity"]) or not is_digest(record["token_hash"]):
        raise ValueError("bad entry digests")
    if key_from_hashes(record["identity"], record["token_hash"]) != key:
        raise ValueError("entry key does not match its identity and tokens")


# --------------------------------------------------------------------------- refs


def refs_to_bytes(refs: dict[str, list[str]]) -> bytes:
    clean = {owner: sorted(set(keys)) for owner, keys in refs.items() if keys}
    return json.dumps({"format": REFS_FORMAT, "owners": clean}, sort_keys=True, indent=1).encode()


def refs_from_bytes(raw: bytes) -> dict[str, list[str]]:
    data = json.loads(raw)
    if not isinstance(data, dict) or data.get("format") != REFS_FORMAT:
        raise ValueError("unknown refs format")
    owners = data.get("owners")
    if not isinstance(owners, dict):
        raise ValueError("refs fields missing")
    for owner, keys in owners.items():
        if not isinstance(keys, list) or not all(is_digest(k) for k in keys):
            raise ValueError(f"bad refs of {owner!r}")
    return owners


def owners_by_key(refs: dict[str, list[str]]) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for owner, keys in refs.items():
        for key in keys:
            out.setdefault(key, []).append(owner)
    return {key: tuple(sorted(owners)) for key, owners in out.items()}
