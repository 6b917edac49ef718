"""The snapshot blob file format: a fixed, self-checking header, then tokens, meta, payload.

Byte layout (all integers little-endian):

    offset  size  field
         0     8  magic b"EFFCTXS1"
         8     2  format version (u16) = 1
        10     2  flags (u16), 0; reserved
        12     4  header length (u32) = 232
        16    64  runtime identity digest, ASCII hex sha256
        80     8  token count n (u64)
        88    32  token hash: sha256 of the n tokens as int32 LE
       120     4  meta length m (u32)
       124     4  reserved, 0
       128    32  meta sha256
       160     8  payload length p (u64)
       168    32  payload sha256
       200    32  header sha256: sha256 of bytes [0, 200)
       232    4n  tokens, int32 LE
    232+4n     m  meta, a UTF-8 JSON object
  232+4n+m     p  payload (opaque to the store; see codec.py for session snapshots)

A file is valid only if its size is exactly 232 + 4n + m + p and every hash matches.
The tokens sit outside the payload so the store can check and index them without
knowing the payload's format; the header hash makes a flipped bit in a length or in the
identity read as damage, not as a foreign or truncated entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from dataclasses import dataclass
from typing import BinaryIO, Iterable, Sequence

import numpy as np

from effctx_core.snapshots.errors import SnapshotError

MAGIC = b"EFFCTXS1"
FORMAT_VERSION = 1
BLOB_SUFFIX = ".snap"

_FIELDS = struct.Struct("<8sHHI64sQ32sII32sQ32s")
_HEADER_HASH_AT = _FIELDS.size  # 200
HEADER_BYTES = _HEADER_HASH_AT + 32  # 232
MAX_META_BYTES = 64 * 1024  # meta is copied into the index; keep it small
MAX_TOKENS = 1 << 31
_HEX64 = re.compile(r"[0-9a-f]{64}")
_READ_CHUNK = 4 << 20


@dataclass(frozen=True)
class BlobHeader:
    identity: str
    n_tokens: int
    token_hash: str
    meta_bytes: int
    meta_sha256: str
    payload_bytes: int
    payload_sha256: str

    @property
    def key(self) -> str:
        return key_from_hashes(self.identity, self.token_hash)

    @property
    def file_bytes(self) -> int:
        return HEADER_BYTES + 4 * self.n_tokens + self.meta_bytes + self.payload_bytes


class BlobDamage(Exception):
    """A check failed; `slug` names the kind of damage (used in quarantine file names)."""

    def __init__(self, slug: str, reason: str):
        self.slug = slug
        self.reason = reason
        super().__init__(reason)


# --------------------------------------------------------------------------- keys


def is_digest(text: str) -> bool:
    return isinstance(text, str) and _HEX64.fullmatch(text) is not None


def check_identity_digest(identity_digest: str) -> None:
    if not is_digest(identity_digest):
        raise SnapshotError(f"not a runtime identity digest (64 lowercase hex characters): {identity_digest!r}")


def token_bytes(tokens: Sequence[int]) -> bytes:
    """The tokens as int32 LE; refuses anything that is not a token id."""
    arr = np.asarray(tokens)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise SnapshotError("tokens must be a flat sequence of integers")
    if arr.size and (arr.min() < -(1 << 31) or arr.max() >= (1 << 31)):
        raise SnapshotError("token ids must fit in int32")
    return arr.astype("<i4").tobytes()


def token_hash(tokens: Sequence[int]) -> str:
    return hashlib.sha256(token_bytes(tokens)).hexdigest()


def key_from_hashes(identity_digest: str, tokens_sha256: str) -> str:
    # Both parts are fixed-length hex, so plain concatenation cannot collide.
    return hashlib.sha256((identity_digest + tokens_sha256).encode("ascii")).hexdigest()


def key_for(identity_digest: str, tokens: Sequence[int]) -> str:
    """The content address: runtime identity + hash of exactly these tokens."""
    check_identity_digest(identity_digest)
    return key_from_hashes(identity_digest, token_hash(tokens))


def prefix_hashes(tokens: Sequence[int], lengths: Iterable[int]) -> dict[int, str]:
    """token_hash(tokens[:n]) for every n in `lengths`, in one pass over the tokens."""
    data = token_bytes(tokens)
    digest = hashlib.sha256()
    done = 0
    out: dict[int, str] = {}
    for n in sorted(set(lengths)):
        if n > len(data) // 4:
            break
        digest.update(data[4 * done : 4 * n])
        done = n
        out[n] = digest.copy().hexdigest()
    return out


# --------------------------------------------------------------------------- writing


def encode_meta(meta: dict | None) -> bytes:
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise SnapshotError("snapshot meta must be a JSON object (a dict)")
    try:
        data = json.dumps(meta, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise SnapshotError(f"snapshot meta is not JSON-serializable: {exc}") from None
    if len(data) > MAX_META_BYTES:
        raise SnapshotError(f"snapshot meta is {len(data)} bytes, more than {MAX_META_BYTES}")
    return data


def build_header(identity: str, tokens_le: bytes, meta: bytes, payload: bytes | memoryview) -> bytes:
    fields = _FIELDS.pack(
        MAGIC, FORMAT_VERSION, 0, HEADER_BYTES, identity.encode("ascii"),
        len(tokens_le) // 4, hashlib.sha256(tokens_le).digest(),
        len(meta), 0, hashlib.sha256(meta).digest(),
        len(payload), hashlib.sha256(payload).digest(),
    )
    return fields + hashlib.sha256(fields).digest()


# --------------------------------------------------------------------------- reading


def parse_header(raw: bytes, file_bytes: int) -> BlobHeader:
    """Check a header against itself and the file size; raises BlobDamage."""
    if len(raw) >= 8 and raw[:8] != MAGIC:
        raise BlobDamage("magic", f"not a snapshot blob (magic {raw[:8]!r}, expected {MAGIC!r})")
    if len(raw) >= 10:
        (version,) = struct.unpack_from("<H", raw, 8)
        if version != FORMAT_VERSION:
            raise BlobDamage("version", f"unsupported format version {version} (this effctx reads {FORMAT_VERSION})")
    if len(raw) < HEADER_BYTES:
        raise BlobDamage("truncated", f"truncated: {file_bytes} bytes, shorter than the {HEADER_BYTES}-byte header")
    fields = raw[:_HEADER_HASH_AT]
    if hashlib.sha256(fields).digest() != raw[_HEADER_HASH_AT:HEADER_BYTES]:
        raise BlobDamage("header", "header checksum mismatch")
    (_, _, _, header_len, identity, n_tokens, t_hash, meta_len, _, m_hash, payload_len, p_hash) = _FIELDS.unpack(fields)
    ident = identity.decode("ascii", "replace")
    if header_len != HEADER_BYTES or not is_digest(ident) or n_tokens > MAX_TOKENS or meta_len > MAX_META_BYTES:
        raise BlobDamage("header", "header fields out of range")
    header = BlobHeader(ident, n_tokens, t_hash.hex(), meta_len, m_hash.hex(), payload_len, p_hash.hex())
    if file_bytes < header.file_bytes:
        raise BlobDamage("truncated", f"truncated: {file_bytes} bytes, the header says {header.file_bytes}")
    if file_bytes > header.file_bytes:
        raise BlobDamage("size", f"{file_bytes - header.file_bytes} unexpected bytes after the payload")
    return header


@dataclass(frozen=True)
class BlobContents:
    header: BlobHeader
    tokens: tuple[int, ...]
    meta: dict
    payload: bytes | None  # None when read with want_payload=False (hashed, not kept)


def read_header(f: BinaryIO) -> BlobHeader:
    size = os.fstat(f.fileno()).st_size
    f.seek(0)
    return parse_header(f.read(HEADER_BYTES), size)


def read_blob(f: BinaryIO, want_payload: bool = True) -> BlobContents:
    """Read and check a whole blob: header, token hash, meta hash, payload hash."""
    header = read_header(f)
    raw_tokens = _read_exact(f, 4 * header.n_tokens)
    if hashlib.sha256(raw_tokens).hexdigest() != header.token_hash:
        raise BlobDamage("checksum", "token list checksum mismatch")
    meta = _read_meta(f, header)
    if want_payload:
        payload = _read_exact(f, header.payload_bytes)
        ok = hashlib.sha256(payload).hexdigest() == header.payload_sha256
    else:
        payload = None
        ok = _hash_stream(f, header.payload_bytes) == header.payload_sha256
    if not ok:
        raise BlobDamage("checksum", "payload checksum mismatch")
    tokens = tuple(np.frombuffer(raw_tokens, dtype="<i4").tolist())
    return BlobContents(header, tokens, meta, payload)


def _read_exact(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:  # the file shrank under us after the size check
        raise BlobDamage("truncated", "truncated while reading")
    return data


def _hash_stream(f: BinaryIO, n: int) -> str:
    digest = hashlib.sha256()
    left = n
    while left:
        block = f.read(min(left, _READ_CHUNK))
        if not block:
            raise BlobDamage("truncated", "truncated while reading")
        digest.update(block)
        left -= len(block)
    return digest.hexdigest()


def read_tokens(f: BinaryIO) -> tuple[BlobHeader, tuple[int, ...]]:
    """Header and tokens only, both checked; what the prefix index needs of a blob."""
    header = read_header(f)
    raw_tokens = _read_exact(f, 4 * header.n_tokens)
    if hashlib.sha256(raw_tokens).hexdigest() != header.token_hash:
        raise BlobDamage("checksum", "token list checksum mismatch")
    return header, tuple(np.frombuffer(raw_tokens, dtype="<i4").tolist())


def read_summary(f: BinaryIO) -> tuple[BlobHeader, dict]:
    """Header and meta only, both checked; enough to index a blob found without an entry."""
    header = read_header(f)
    f.seek(HEADER_BYTES + 4 * header.n_tokens)
    return header, _read_meta(f, header)


def _read_meta(f: BinaryIO, header: BlobHeader) -> dict:
    raw = _read_exact(f, header.meta_bytes)
    if hashlib.sha256(raw).hexdigest() != header.meta_sha256:
        raise BlobDamage("checksum", "meta checksum mismatch")
    try:
        meta = json.loads(raw) if raw else {}
    except ValueError:
        meta = None
    if not isinstance(meta, dict):
        raise BlobDamage("meta", "meta is not a JSON object")
    return meta
