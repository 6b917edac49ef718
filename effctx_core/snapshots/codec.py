"""SessionSnapshot <-> store payload, and the two calls that save and load one.

Payload layout (little-endian):

    offset  size  field
         0     4  magic b"EFSS"
         4     2  version (u16) = 1
         6     2  flags (u16): bit 0 = logits present (tells None from empty)
         8     8  token count n (u64)
        16     8  state length s (u64)
        24     8  logits length l (u64), 0 without logits
        32    4n  tokens, int32 LE
     32+4n     s  state (the backend's own sequence-state bytes)
   32+4n+s     l  logits (float32, as the backend wrote them)

The identity is not in the payload: the store's header carries its digest, and the
caller supplies the RuntimeIdentity it expects, so a payload can never claim one.
"""

from __future__ import annotations

import struct

import numpy as np

from effctx_core.contract import SessionSnapshot
from effctx_core.identity import RuntimeIdentity
from effctx_core.snapshots.blobfile import key_for, token_bytes
from effctx_core.snapshots.errors import CorruptSnapshotError
from effctx_core.snapshots.store import EntryInfo, SnapshotStore

CODEC_MAGIC = b"EFSS"
CODEC_VERSION = 1
_HAS_LOGITS = 1
_HEAD = struct.Struct("<4sHHQQQ")


class PayloadError(ValueError):
    """The payload is not a session snapshot this codec wrote."""


def encode(snapshot: SessionSnapshot) -> bytes:
    tokens = token_bytes(snapshot.tokens)
    logits = snapshot.logits if snapshot.logits is not None else b""
    flags = _HAS_LOGITS if snapshot.logits is not None else 0
    head = _HEAD.pack(CODEC_MAGIC, CODEC_VERSION, flags, len(tokens) // 4, len(snapshot.state), len(logits))
    return b"".join((head, tokens, bytes(snapshot.state), bytes(logits)))


def _layout(payload: bytes | memoryview) -> tuple[int, int, int, int | None]:
    """(token count, offset of state, state length, logits length or None); checks sizes."""
    if len(payload) < _HEAD.size:
        raise PayloadError(f"payload of {len(payload)} bytes is shorter than its {_HEAD.size}-byte header")
    magic, version, flags, n, s, n_logits = _HEAD.unpack_from(payload)
    if magic != CODEC_MAGIC:
        raise PayloadError(f"payload is not a session snapshot (magic {bytes(magic)!r})")
    if version != CODEC_VERSION:
        raise PayloadError(f"session snapshot payload version {version} is not {CODEC_VERSION}")
    if flags & ~_HAS_LOGITS or (not flags & _HAS_LOGITS and n_logits):
        raise PayloadError(f"session snapshot payload has unknown flags {flags:#x}")
    expected = _HEAD.size + 4 * n + s + n_logits
    if len(payload) != expected:
        raise PayloadError(f"session snapshot payload is {len(payload)} bytes, its header says {expected}")
    return n, _HEAD.size + 4 * n, s, (n_logits if flags & _HAS_LOGITS else None)


def decode(payload: bytes | memoryview, identity: RuntimeIdentity) -> SessionSnapshot:
    """The snapshot back, exactly; raises PayloadError if the layout does not add up."""
    view = memoryview(payload).cast("B")
    n, state_at, s, n_logits = _layout(view)
    tokens = tuple(np.frombuffer(view[_HEAD.size:state_at], dtype="<i4").tolist())
    state = bytes(view[state_at:state_at + s])
    logits = None if n_logits is None else bytes(view[state_at + s:state_at + s + n_logits])
    return SessionSnapshot(identity=identity, tokens=tokens, state=state, logits=logits)


def describe(payload: bytes | memoryview) -> dict | None:
    """Sizes of a session snapshot payload, or None if the payload is something else."""
    try:
        n, _, s, n_logits = _layout(memoryview(payload).cast("B"))
    except PayloadError:
        return None
    return {"kind": "session", "n_tokens": n, "state_bytes": s, "logits_bytes": n_logits}


def snapshot_key(snapshot: SessionSnapshot) -> str:
    """The key save_snapshot stores `snapshot` under, known before it is written: the
    content address of its runtime identity and tokens."""
    return key_for(snapshot.identity.digest(), snapshot.tokens)


def save_snapshot(store: SnapshotStore, snapshot: SessionSnapshot, meta: dict | None = None,
                  owner: str | None = None) -> EntryInfo:
    return store.put(snapshot.identity.digest(), snapshot.tokens, encode(snapshot), meta, owner=owner)


def load_snapshot(store: SnapshotStore, key: str, identity: RuntimeIdentity) -> SessionSnapshot:
    """The stored snapshot, checked against the identity the caller runs under.

    A payload that passed the store's checksums but does not decode, or whose tokens
    differ from the entry's, was written wrong: it is quarantined like a damaged blob.
    """
    stored = store.get(key, identity.digest())
    try:
        snapshot = decode(stored.payload, identity)
        if snapshot.tokens != stored.tokens:
            raise PayloadError("payload tokens differ from the entry's tokens")
    except PayloadError as exc:
        raise CorruptSnapshotError(key, str(exc), store.quarantine(key, str(exc))) from None
    return snapshot
