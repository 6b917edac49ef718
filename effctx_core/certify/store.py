"""Certificates on disk: one JSON file per cell, sealed with a digest, checked on read.

Layout under the root (default: <user data dir>/certificates; XDG_DATA_HOME moves it):

    <backend>--<profile>--<cell_key[:16]>.json   the certificate of one cell
    .<name>.*.tmp                                a certificate being written (atomic.py)
    damaged/<name>.<YYYYmmdd-HHMMSS>[.n]         files that failed a check, kept for a look
    partial/<cell key>.json                      the finished stages of a certification (runner.py)
    locks/<cell key>.lock                        flock-held by the process certifying the cell

A file is used only after it passed, in this order: it is a regular file of a plausible
size, UTF-8 JSON without duplicate keys, of a schema version this effctx reads, valid
against the schema, sealed with the digest of its own contents, and named for the cell
it describes. A file that fails is reported with the reason and left where it is until
`quarantine` moves it to damaged/; nothing here deletes a file.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effctx_core import models
from effctx_core.atomic import atomic_write_bytes, fsync_dir
from effctx_core.certify.certificate import canonical_bytes, document_digest, unsealed
from effctx_core.certify.schema import SCHEMA_VERSION, CertificateError, check_document, first_problem
from effctx_core.user_files import UserFileError, open_input, os_reason

SUFFIX = ".json"
DAMAGED = "damaged"
# The example certificate is about 3 KB and grows by a few hundred bytes a workload or
# passkey length; a file larger than this is not one effctx wrote, and is not read whole.
MAX_BYTES = 4 * 1024 * 1024

# File names keep to portable characters: a profile name comes from a file stem and may
# hold spaces or separators. The cell key part keeps two cells with the same names apart.
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


# Where certificates live instead of the data dir: a second set kept apart (a demo, the
# test suite) without moving the converted models that share the data dir.
ROOT_ENV = "EFFCTX_CERTIFICATES"


def default_root() -> Path:
    # Looked up on every call (models.data_dir, not a copy) so it follows the platform dirs.
    override = os.environ.get(ROOT_ENV)
    return Path(override).expanduser() if override else models.data_dir() / "certificates"


def _name_part(text: str) -> str:
    part = _UNSAFE.sub("_", text)[:64]
    return "_" + part[1:] if part.startswith(".") else part


def file_name(backend: str, profile: str, cell_key: str) -> str:
    return f"{_name_part(backend)}--{_name_part(profile)}--{cell_key[:16]}{SUFFIX}"


def _expected_name(doc: dict) -> str:
    return file_name(doc["cell"]["backend"], doc["cell"]["profile"], doc["cell_key"])


@dataclass(frozen=True)
class StoredCertificate:
    """One file of the store: its document when it passed every check, else why not."""

    path: Path
    document: dict | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None


class _Bad(Exception):
    """Internal: why a file is not a usable certificate; load adds the path."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    # json.loads keeps the last of two equal keys, so a second value could hide behind
    # the one the digest was computed over.
    doc: dict = {}
    for key, value in pairs:
        if key in doc:
            raise _Bad(f"not a certificate (duplicate key {key!r})")
        doc[key] = value
    return doc


def _no_constant(name: str) -> float:
    raise _Bad(f"not JSON ({name} is not a JSON number)")


def _parse(data: bytes) -> dict:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Bad("not JSON (not UTF-8 text)") from None
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise _Bad(f"not JSON ({e.msg}: line {e.lineno} column {e.colno})") from None
    if not isinstance(doc, dict):
        raise _Bad(f"not a certificate (a JSON {type(doc).__name__}, not an object)")
    return doc


def _check(doc: dict, name: str) -> None:
    version = doc.get("schema_version")
    # An int of another version is a certificate this effctx does not read, not a
    # damaged one; anything else falls to the schema, which names what is wrong.
    if isinstance(version, int) and not isinstance(version, bool) and version != SCHEMA_VERSION:
        raise _Bad(f"schema version {version} is not one this effctx reads ({SCHEMA_VERSION})")
    problem = first_problem(doc)
    if problem is not None:
        raise _Bad(problem)
    if "digest" not in doc:
        raise _Bad("it has no digest")
    if doc["digest"] != document_digest(doc):
        raise _Bad("digest does not match its contents")
    expected = _expected_name(doc)
    if name != expected:
        raise _Bad(f"its name does not match the cell it describes ({expected})")


class CertificateStore:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else default_root()
        self.damaged_dir = self.root / DAMAGED

    def path_for(self, backend: str, profile: str, cell_key: str) -> Path:
        return self.root / file_name(backend, profile, cell_key)

    # ----------------------------------------------------------------- write

    def save(self, doc: dict) -> Path:
        """Seal the document (sets doc["digest"]), check it, write it atomically over
        the cell's previous certificate and return the path. An invalid document is
        refused before any byte is written. A file at that path that does not load
        (damaged, foreign) is moved to damaged/ first, so it is never written over."""
        # Checked in the form it will be read back in (tuples become lists), so what is
        # written is exactly what passed; canonical_bytes refuses what is not plain JSON.
        # The key order of the caller's document is kept: the file reads top to bottom.
        canonical_bytes(doc)
        body = json.loads(json.dumps(unsealed(doc), ensure_ascii=False))
        check_document(body)
        digest = document_digest(body)
        sealed = {**body, "digest": digest}
        path = self.root / _expected_name(sealed)
        if os.path.lexists(path):
            try:
                self.load(path)
            except CertificateError:
                self.quarantine(path)
        data = (json.dumps(sealed, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, data)
        except OSError as exc:
            raise CertificateError(f"cannot write certificate {path}: {os_reason(exc)}") from None
        doc["digest"] = digest
        return path

    # ----------------------------------------------------------------- read

    def load(self, path: Path) -> dict:
        """The checked document of one file, or CertificateError naming the file and why."""
        path = Path(path)
        try:
            with open_input(path, "certificate file") as f:
                size = os.fstat(f.fileno()).st_size
                if size == 0:
                    raise CertificateError(f"certificate {path}: the file is empty")
                if size > MAX_BYTES:
                    raise CertificateError(
                        f"certificate {path}: {size} bytes is more than a certificate holds (at most {MAX_BYTES})")
                data = f.read(MAX_BYTES + 1)
        except UserFileError as e:
            raise CertificateError(str(e)) from None
        except OSError as exc:
            raise CertificateError(f"cannot read certificate {path}: {os_reason(exc)}") from None
        try:
            doc = _parse(data)
            _check(doc, path.name)
        except _Bad as e:
            raise CertificateError(f"certificate {path}: {e}") from None
        return doc

    def scan(self) -> list[StoredCertificate]:
        """Every certificate file of the store, by name, each loaded or with its error.
        A damaged file is reported here, never raised and never moved."""
        try:
            entries = sorted(os.scandir(self.root), key=lambda e: e.name)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise CertificateError(f"cannot list the certificates in {self.root}: {os_reason(exc)}") from None
        found = []
        for entry in entries:
            if not entry.name.endswith(SUFFIX) or entry.name.startswith("."):
                continue
            path = Path(entry.path)
            try:
                found.append(StoredCertificate(path, self.load(path), None))
            except CertificateError as e:
                found.append(StoredCertificate(path, None, str(e)))
        return found

    # ----------------------------------------------------------------- damaged files

    def quarantine(self, path: Path) -> Path:
        """Move a file of the store to damaged/<name>.<time>[.n] and return where it went."""
        path = Path(path)
        if path.parent.resolve() != self.root.resolve():
            raise CertificateError(f"cannot move {path} aside: it is not in the certificate store {self.root}")
        if not os.path.lexists(path):
            raise CertificateError(f"cannot move {path} aside: it does not exist")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        try:
            self.damaged_dir.mkdir(parents=True, exist_ok=True)
            target = self.damaged_dir / f"{path.name}.{stamp}"
            n = 1
            while os.path.lexists(target):
                n += 1
                target = self.damaged_dir / f"{path.name}.{stamp}.{n}"
            os.rename(path, target)
            fsync_dir(self.damaged_dir)
            fsync_dir(self.root)
        except OSError as exc:
            raise CertificateError(f"cannot move {path} aside to {self.damaged_dir}: {os_reason(exc)}") from None
        return target
