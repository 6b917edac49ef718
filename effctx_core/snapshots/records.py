"""What the snapshot store hands back: entries, reads and maintenance reports."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import NamedTuple


@dataclass(frozen=True)
class EntryInfo:
    key: str
    identity: str
    n_tokens: int
    token_hash: str
    bytes: int
    created: float
    last_used: float
    refs: tuple[str, ...]  # owners (saved snapshot trees) keeping this entry alive
    meta: dict = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["refs"] = list(self.refs)
        return data


class Stored(NamedTuple):
    tokens: tuple[int, ...]
    payload: bytes
    meta: dict


@dataclass(frozen=True)
class Peek:
    """A checked blob read without an identity expectation (for `snapshots show`)."""

    key: str
    identity: str
    tokens: tuple[int, ...]
    meta: dict
    payload: bytes
    file_bytes: int


@dataclass(frozen=True)
class Quarantined:
    """A file found bad. `moved_to` is empty when it could not be moved (read-only store)."""

    name: str  # the file's name before the move (a blob's is <key>.snap)
    reason: str
    moved_to: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class StoreUsage:
    root: str
    entries: int
    total_bytes: int
    referenced_bytes: int
    budget_bytes: int
    budget_source: str

    @property
    def over_budget_bytes(self) -> int:
        return max(0, self.total_bytes - self.budget_bytes)

    def to_dict(self) -> dict:
        return {**asdict(self), "over_budget_bytes": self.over_budget_bytes}


@dataclass(frozen=True)
class GcReport:
    evicted: tuple[str, ...]
    freed_bytes: int
    temp_removed: tuple[str, ...]
    adopted: tuple[str, ...]  # blobs found without an index entry (a writer died before indexing)
    dropped: tuple[str, ...]  # index entries whose blob is gone
    quarantined: tuple[Quarantined, ...]
    quarantine_purged: tuple[str, ...]
    usage: StoreUsage

    def to_dict(self) -> dict:
        data = asdict(self)
        data["usage"] = self.usage.to_dict()
        return data


@dataclass(frozen=True)
class VerifyReport:
    checked: int
    ok: int
    quarantined: tuple[Quarantined, ...]
    adopted: tuple[str, ...]
    dropped: tuple[str, ...]
    reindexed: tuple[str, ...]  # entries whose index record disagreed with the blob header
    dangling_refs: tuple[tuple[str, str], ...]  # (owner, key) with no such entry

    @property
    def clean(self) -> bool:
        return not self.quarantined

    def to_dict(self) -> dict:
        data = asdict(self)
        data["dangling_refs"] = [{"owner": o, "key": k} for o, k in self.dangling_refs]
        data["clean"] = self.clean
        return data
