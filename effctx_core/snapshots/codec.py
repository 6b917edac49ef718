"""SessionSnapshot <-> store payload, and the two calls that save and load one.

Payload layout (little-endian):

    offset  size  field
         0     4  magic b"EFSS"
         4     2  version (u16) = 2
         6     2  flags (u16): bit 0 = logits present (tells None from empty)
         8     8  token count n (u64): the state's tokens, then the pending ones
        16     8  state length s (u64)
        24     8  logits length l (u64), 0 without logits
        32     8  pending count p (u64): the last p of the n tokens are not in the state
        40    4n  tokens, int32 LE
     40+4n     s  state (the backend's own sequence-state bytes)
   40+4n+s     l  logits (float32, as the backend wrote them)

Version 1 (written before pending tokens were kept) has no pending count: its header is
32 bytes and every token is in the state. It is still read.

The identity is not in the payload: the store's header carries its digest, and the
caller supplies the RuntimeIdentity it expects, so a payload can never claim one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from effctx_core.contract import SessionSnapshot
from effctx_core.identity import RuntimeIdentity
from effctx_core.snapshots.blobfile import key_for, token_bytes
from effctx_core.snapshots.errors import CorruptSnapshotError
from effctx_core.snapshots.store import EntryInfo, SnapshotStore

CODEC_MAGIC = b"EFSS"
CODEC_VERSION = 2
_HAS_LOGITS = 1
_HEAD_V1 = struct.Struct("<4sHHQQQ")
_PENDING = struct.Struct("<Q")
_HEAD_BYTES = {1: _HEAD_V1.size, 2: _HEAD_V1.size + _PENDING.size}


class PayloadError(ValueError):
    """The payload is not a session snapshot this codec wrote."""


def encode(snapshot: SessionSnapshot) -> bytes:
    tokens = token_bytes(snapshot.tape)
    logits = snapshot.logits if snapshot.logits is not None else b""
    flags = _HAS_LOGITS if snapshot.logits is not None else 0
    head = _HEAD_V1.pack(CODEC_MAGIC, CODEC_VERSION, flags, len(tokens) // 4, len(snapshot.state), len(logits))
    return b"".join((head, _PENDING.pack(len(snapshot.pending)), tokens, bytes(snapshot.state), bytes(logits)))


@dataclass(frozen=True)
class _Layout:
    n_tokens: int  # the state's and the pending ones
    n_pending: int
    tokens_at: int
    state_bytes: int
    logits_bytes: int | None

    @property
    def state_at(self) -> int:
        return self.tokens_at + 4 * self.n_tokens


def _layout(payload: bytes | memoryview) -> _Layout:
    """Where each part of the payload is; checks sizes."""
    if len(payload) < _HEAD_V1.size:
        raise PayloadError(f"payload of {len(payload)} bytes is shorter than its {_HEAD_V1.size}-byte header")
    magic, version, flags, n, s, n_logits = _HEAD_V1.unpack_from(payload)
    if magic != CODEC_MAGIC:
        raise PayloadError(f"payload is not a session snapshot (magic {bytes(magic)!r})")
    head = _HEAD_BYTES.get(version)
    if head is None:
        raise PayloadError(f"session snapshot payload version {version} is not one of {sorted(_HEAD_BYTES)}")
    if flags & ~_HAS_LOGITS or (not flags & _HAS_LOGITS and n_logits):
        raise PayloadError(f"session snapshot payload has unknown flags {flags:#x}")
    if len(payload) < head:
        raise PayloadError(f"payload of {len(payload)} bytes is shorter than its {head}-byte header")
    pending = _PENDING.unpack_from(payload, _HEAD_V1.size)[0] if version >= 2 else 0
    if pending > n:
        raise PayloadError(f"session snapshot payload has {pending} pending of its {n} tokens")
    expected = head + 4 * n + s + n_logits
    if len(payload) != expected:
        raise PayloadError(f"session snapshot payload is {len(payload)} bytes, its header says {expected}")
    return _Layout(n, pending, head, s, n_logits if flags & _HAS_LOGITS else None)


def decode(payload: bytes | memoryview, identity: RuntimeIdentity) -> SessionSnapshot:
    """The snapshot back, exactly; raises PayloadError if the layout does not add up."""
    view = memoryview(payload).cast("B")
    layout = _layout(view)
    tape = tuple(np.frombuffer(view[layout.tokens_at:layout.state_at], dtype="<i4").tolist())
    held = layout.n_tokens - layout.n_pending
    state_end = layout.state_at + layout.state_bytes
    state = bytes(view[layout.state_at:state_end])
    logits = None if layout.logits_bytes is None else bytes(view[state_end:state_end + layout.logits_bytes])
    return SessionSnapshot(identity=identity, tokens=tape[:held], state=state, logits=logits, pending=tape[held:])


def describe(payload: bytes | memoryview) -> dict | None:
    """Sizes of a session snapshot payload, or None if the payload is something else."""
    try:
        layout = _layout(memoryview(payload).cast("B"))
    except PayloadError:
        return None
    return {"kind": "session", "n_tokens": layout.n_tokens, "pending_tokens": layout.n_pending,
            "state_bytes": layout.state_bytes, "logits_bytes": layout.logits_bytes}


def snapshot_key(snapshot: SessionSnapshot) -> str:
    """The key save_snapshot stores `snapshot` under, known before it is written: the
    content address of its runtime identity and tape (pending tokens included)."""
    return key_for(snapshot.identity.digest(), snapshot.tape)


def save_snapshot(store: SnapshotStore, snapshot: SessionSnapshot, meta: dict | None = None,
                  owner: str | None = None) -> EntryInfo:
    """Stored under its whole tape: a prefix lookup restores the session as it was."""
    return store.put(snapshot.identity.digest(), snapshot.tape, encode(snapshot), meta, owner=owner)


def load_snapshot(store: SnapshotStore, key: str, identity: RuntimeIdentity) -> SessionSnapshot:
    """The stored snapshot, checked against the identity the caller runs under.

    A payload that passed the store's checksums but does not decode, or whose tokens
    differ from the entry's, was written wrong: it is quarantined like a damaged blob.
    """
    stored = store.get(key, identity.digest())
    try:
        snapshot = decode(stored.payload, identity)
        if snapshot.tape != stored.tokens:
            raise PayloadError("payload tokens differ from the entry's tokens")
    except PayloadError as exc:
        raise CorruptSnapshotError(key, str(exc), store.quarantine(key, str(exc))) from None
    return snapshot
