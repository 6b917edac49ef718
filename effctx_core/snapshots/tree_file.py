"""Session files: a SnapshotTree as JSON, named under data_dir()/sessions or anywhere.

One file holds the whole tree and nothing else: node records, `current` and the id
counter. Blob payloads (the saved KV states) are never in it, only their snapshot store
keys; a future format version may embed them, which is why the file has a version.

Tokens are written as base64 of int32 little-endian, per node (own tokens only). Against
a plain JSON int list that is about a quarter smaller for vocabularies of 10^5 ids (5.3
characters a token against 6-7 with the comma), decodes with one frombuffer call instead
of parsing every number, and is exact and fixed-width; the readable form of a node is
its `turn`, nobody reads token ids in a session file.

Version 2 keeps a turn's input and reply apart ("turn": {"input", "reply"}): version 1
wrote them as one "text", "input\nreply", which only a one-line input could be cut back
into. Version 1 files are still read, their text cut at its first line break as before.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from effctx_core import models
from effctx_core.atomic import atomic_write_bytes
from effctx_core.snapshots.blobfile import is_digest
from effctx_core.snapshots.tree import (
    Node,
    SessionFileError,
    SessionNameError,
    SnapshotTree,
    SnapshotTreeError,
    TurnText,
)
from effctx_core.user_files import (
    UserFileError,
    check_output_file,
    os_reason,
    quarantine_file,
    read_input_bytes,
)

FORMAT = "effctx-session"
VERSION = 2
TOKEN_ENCODING = "int32le-base64"
SUFFIX = ".json"
# How every file encode_tree writes starts: tells an export it may replace a file.
_HEAD = f'{{\n "format": "{FORMAT}"'.encode()

# Portable file names only: no separators, no leading dot (hidden, "..").
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def sessions_dir() -> Path:
    # Looked up on every call (models.data_dir, not a copy) so it follows the platform dirs.
    return models.data_dir() / "sessions"


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SessionNameError(
            f"invalid session name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def session_path(name: str, directory: Path | None = None) -> Path:
    return Path(directory if directory is not None else sessions_dir()) / (check_name(name) + SUFFIX)


def list_sessions(directory: Path | None = None) -> list[str]:
    """Names of the saved sessions, sorted (files that are not valid names are skipped)."""
    base = Path(directory if directory is not None else sessions_dir())
    if not base.is_dir():
        return []
    names = (p.name[: -len(SUFFIX)] for p in base.iterdir() if p.name.endswith(SUFFIX) and p.is_file())
    return sorted(n for n in names if _NAME.fullmatch(n))


def save_tree(tree: SnapshotTree, name: str, directory: Path | None = None) -> Path:
    """Write the tree as session `name` (data_dir()/sessions/NAME.json by default)."""
    path = session_path(name, directory)
    write_tree_file(tree, path)
    tree.name = name
    return path


def load_tree(name: str, directory: Path | None = None) -> SnapshotTree:
    """A saved session. One whose file is damaged is moved to `quarantine/` beside it
    (the error says where), so that the next save writes a new file instead of over it."""
    path = session_path(name, directory)
    if not os.path.lexists(path):
        raise SessionFileError(f"no saved session {name!r} ({path})")
    try:
        tree = decode_tree(_read(path))
    except _TooNew as e:  # not damaged: a newer effctx reads it, so it stays where it is
        raise SessionFileError(f"{path}: {e}") from None
    except _Corrupt as e:
        moved = quarantine_file(path)
        raise SessionFileError(f"{path}: {e}; the file was moved to {moved}") from None
    tree.name = name
    return tree


def check_export_target(path: Path) -> Path:
    """Refuse, before writing, an export over a file that is not an effctx session file
    (a session file is replaced whole; anything else would be lost)."""
    path = check_output_file(path, "export file")
    if path.is_file():
        head = _read(path)[: len(_HEAD)]
        if head and head != _HEAD:
            raise UserFileError(f"{path} exists and is not an effctx session file: refusing to write over it")
    return path


def write_tree_file(tree: SnapshotTree, path: Path) -> None:
    try:
        atomic_write_bytes(path, encode_tree(tree))
    except OSError as exc:
        raise SessionFileError(f"cannot write session file {path}: {os_reason(exc)}") from None


def _read(path: Path) -> bytes:
    try:
        return read_input_bytes(path, "session file")
    except UserFileError as e:
        raise SessionFileError(str(e)) from None


def read_tree_file(path: Path) -> SnapshotTree:
    try:
        return decode_tree(_read(path))
    except _Corrupt as e:
        raise SessionFileError(f"{path}: {e}") from None


# --------------------------------------------------------------------------- encoding


def encode_tokens(tokens: Sequence[int]) -> str:
    return base64.b64encode(np.asarray(tokens, dtype="<i4").tobytes()).decode("ascii")


def decode_tokens(text: str) -> tuple[int, ...]:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _Corrupt("corrupt session file: bad token data") from None
    if len(raw) % 4:
        raise _Corrupt("corrupt session file: token data is not a whole number of int32")
    arr = np.frombuffer(raw, dtype="<i4")
    if arr.size and int(arr.min()) < 0:
        raise _Corrupt("corrupt session file: negative token id")
    return tuple(arr.tolist())


def encode_tree(tree: SnapshotTree) -> bytes:
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "tokens": TOKEN_ENCODING,
        "current": tree.current,
        "next_id": tree.next_id,
        "nodes": [
            {
                "id": n.id,
                "parent": n.parent,
                "label": n.label,
                "created": n.created,
                "kind": n.kind,
                "identity": n.identity_digest,
                "tokens": encode_tokens(n.own_tokens),
                "residency": n.residency,
                "metrics": n.metrics,
                "blob": n.blob,
                "turn": None if n.turn is None else {"input": n.turn.input, "reply": n.turn.reply},
            }
            for n in tree
        ],
    }
    return (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


class _Corrupt(Exception):
    """Internal: what is wrong with the document; read_tree_file adds the path."""


class _TooNew(_Corrupt):
    """Internal: a document of a later format version."""


def _field(obj: dict, key: str, types: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise _Corrupt(f"corrupt session file: {where} has no {key!r}")
    value = obj[key]
    # bool is an int in Python but never a valid number, id or counter here
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise _Corrupt(f"corrupt session file: {where} {key!r} has the wrong type")
    if not isinstance(value, types):
        raise _Corrupt(f"corrupt session file: {where} {key!r} has the wrong type")
    return value


# A node's residency is a ResidencyReport.to_dict(): the console draws it as it is.
_RESIDENCY_COUNTS = ("n_tokens", "sink_tokens", "recent_tokens", "hot_tokens", "cold_tokens", "evicted_tokens",
                     "resident_tokens")


def _check_residency(residency: dict, where: str) -> None:
    where = f"{where} residency"
    _field(residency, "policy", str, where)
    _field(residency, "source", str, where)
    for key in _RESIDENCY_COUNTS:
        if _field(residency, key, int, where) < 0:
            raise _Corrupt(f"corrupt session file: {where} {key!r} is negative")
    budget = _field(residency, "budget", (int, type(None)), where)
    if budget is not None and budget < 0:
        raise _Corrupt(f"corrupt session file: {where} 'budget' is negative")
    _field(residency, "over_budget", bool, where)
    for key in ("evicted_ranges", "cold_ranges"):
        for item in _field(residency, key, list, where):
            ok = (isinstance(item, list) and len(item) == 2
                  and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in item)
                  and item[0] <= item[1])
            if not ok:
                raise _Corrupt(f"corrupt session file: {where} {key!r} holds {item!r}, not a [start, end] range")


def _turn(raw: dict, version: int, where: str) -> TurnText | None:
    if version == 1:
        text = _field(raw, "text", (str, type(None)), where)
        if text is None:
            return None
        said, _, reply = text.partition("\n")  # a version 1 input was one line
        return TurnText(said, reply)
    turn = _field(raw, "turn", (dict, type(None)), where)
    if turn is None:
        return None
    return TurnText(_field(turn, "input", str, f"{where} turn"), _field(turn, "reply", str, f"{where} turn"))


def decode_tree(data: bytes) -> SnapshotTree:
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise _Corrupt("not a session file (not UTF-8 text)") from None
    except json.JSONDecodeError as e:
        raise _Corrupt(f"not a session file (invalid JSON: {e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _Corrupt("not an effctx session file")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _Corrupt(f"corrupt session file: bad format version {version!r}")
    if version > VERSION:
        raise _TooNew(f"session file format version {version} is newer than this effctx reads ({VERSION})")
    if doc.get("tokens") != TOKEN_ENCODING:
        raise _Corrupt(f"corrupt session file: unknown token encoding {doc.get('tokens')!r}")
    current = _field(doc, "current", (str, type(None)), "the file")
    next_id = _field(doc, "next_id", int, "the file")
    raw_nodes = _field(doc, "nodes", list, "the file")
    nodes = []
    for i, raw in enumerate(raw_nodes):
        if not isinstance(raw, dict):
            raise _Corrupt(f"corrupt session file: node {i} is not an object")
        where = f"node {i}"
        node_id = _field(raw, "id", str, where)
        created = _field(raw, "created", (int, float), where)
        if not math.isfinite(created):
            raise _Corrupt(f"corrupt session file: {where} 'created' is not finite")
        kind = _field(raw, "kind", str, where)
        if not node_id or not kind:
            raise _Corrupt(f"corrupt session file: {where} has an empty id or kind")
        blob = _field(raw, "blob", (str, type(None)), where)
        if blob is not None and not is_digest(blob):
            raise _Corrupt(f"corrupt session file: {where} has a blob key that is not a snapshot key ({blob[:80]!r})")
        identity = _field(raw, "identity", str, where)
        residency = _field(raw, "residency", (dict, type(None)), where)
        if residency is not None:
            _check_residency(residency, where)
        nodes.append(
            Node(
                id=node_id,
                parent=_field(raw, "parent", (str, type(None)), where),
                label=_field(raw, "label", str, where),
                created=float(created),
                own_tokens=decode_tokens(_field(raw, "tokens", str, where)),
                kind=kind,
                identity_digest=identity,
                residency=residency,
                metrics=_field(raw, "metrics", (dict, type(None)), where),
                blob=blob,
                turn=_turn(raw, version, where),
            )
        )
    if next_id < 0:
        raise _Corrupt("corrupt session file: negative next_id")
    try:
        return SnapshotTree._rebuild(nodes, current, next_id)
    except SnapshotTreeError as e:
        raise _Corrupt(f"corrupt session file: {e}") from None
