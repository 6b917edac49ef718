"""The certification matrix: every cell with its certificate here, if it has one.

A cell's advertised context is its certified limit; a cell without a certificate that
counts on this machine says "uncertified", never a number from what it allocates.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from effctx_core.cells import Cell, list_cells
from effctx_core.certify.hardware import this_machine
from effctx_core.certify.here import Here, why_not_here
from effctx_core.certify.runner import profile_digest
from effctx_core.certify.store import CertificateStore
from effctx_core.contract import ModelInfo
from effctx_core.profiles import Profile
from effctx_core.units import format_counted

CERTIFIED, UNCERTIFIED, FAILED, UNSUPPORTED = "certified", "uncertified", "failed", "unsupported"


@dataclass(frozen=True)
class MatrixRow:
    cell: Cell
    status: str  # certified, uncertified, failed, unsupported
    note: str  # one line: why this status
    certificate: dict | None = None  # the one that counts here

    @property
    def certified_tokens(self) -> int | None:
        if self.status != CERTIFIED or self.certificate is None:
            return None
        return self.certificate["context"]["certified"]

    @property
    def effective(self) -> dict | None:
        """The certificate's effective context (absent in certificates made before the task families)."""
        if self.status != CERTIFIED or self.certificate is None:
            return None
        return self.certificate["context"].get("effective")

    @property
    def advertised(self) -> str:
        """What the cell may be said to hold."""
        if self.status == CERTIFIED:
            return f"certified up to {format_counted(self.certified_tokens or 0, 'token')}"
        if self.status == FAILED and self.certificate is not None:
            return f"failed: {self.certificate['failed_gate']} gate"
        return self.status

    def figures(self) -> dict:
        """The headline figures of its certificate (empty without one)."""
        doc = self.certificate
        if doc is None:
            return {}
        engine = doc["throughput"]["engine"]
        return {"prefill_tps": engine["prefill_tps"], "decode_tps": engine["decode_tps"],
                "engine_raw": doc["throughput"]["engine_raw"], "certified": doc["context"]["certified"],
                "allocated": doc["context"]["allocated"], "effective": doc["context"].get("effective"),
                "created": doc["created"], "plan": doc["plan"]}

    def to_dict(self) -> dict:
        return {**self.cell.to_dict(), "status": self.status, "advertised": self.advertised, "note": self.note,
                "figures": self.figures(), "certificate": self.certificate["cell_key"] if self.certificate else None}


@dataclass(frozen=True)
class Matrix:
    rows: tuple[MatrixRow, ...]
    damaged: tuple[str, ...]  # one line per stored certificate that could not be read

    def row(self, profile: str) -> MatrixRow | None:
        return next((r for r in self.rows if r.cell.profile == profile), None)

    def certified(self) -> list[MatrixRow]:
        return [r for r in self.rows if r.status == CERTIFIED]

    def to_dict(self) -> dict:
        return {"cells": [r.to_dict() for r in self.rows], "damaged_certificates": list(self.damaged)}


def here_for(info: ModelInfo, profile: Profile) -> Here:
    return Here(this_machine().machine_id, info.backend, info.backend_version, info.identity.model_sha256,
                profile.name, profile_digest(profile))


def _newest_first(documents: list[dict], here: Here) -> list[dict]:
    """The stored certificates of `here`'s backend and profile, the newest first."""
    return sorted((d for d in documents if d["cell"]["backend"] == here.backend
                   and d["cell"]["profile"] == here.profile_name), key=lambda d: d["created"], reverse=True)


def not_counted(documents: list[dict], here: Here) -> str | None:
    """Why the cell's newest stored certificate does not count here; None when there is
    none or it counts."""
    mine = _newest_first(documents, here)
    return why_not_here(mine[0], here) if mine else None


def standing(documents: list[dict], here: Here) -> tuple[str, str, dict | None]:
    """(status, why, the certificate that counts) of the cell `here` among `documents`:
    the newest certificate of that backend and profile that counts on this machine."""
    refused = []
    for doc in _newest_first(documents, here):
        why = why_not_here(doc, here)
        if why is None:
            return (CERTIFIED if doc["status"] == "certified" else FAILED), doc["reason"], doc
        refused.append(why)
    run = f"run `effctx certify --profile {here.profile_name}`"
    if refused:
        return UNCERTIFIED, f"its certificate does not count here: {refused[0]}; {run}", None
    return UNCERTIFIED, f"no certificate; {run}", None


def stored_documents(store: CertificateStore) -> tuple[list[dict], list[str]]:
    """The certificates that could be read, and one line per one that could not."""
    documents, damaged = [], []
    for stored in store.scan():
        if stored.document is not None:
            documents.append(stored.document)
        else:
            damaged.append(str(stored.error))
    return documents, damaged


def _row(cell: Cell, documents: list[dict]) -> MatrixRow:
    if not cell.runnable or cell.info is None or cell.profile_record is None:
        return MatrixRow(cell, UNSUPPORTED, cell.reason)
    status, note, doc = standing(documents, here_for(cell.info, cell.profile_record))
    return MatrixRow(cell, status, note, doc)


def cell_matrix(model_path: Path, model_name: str, store: CertificateStore | None = None) -> Matrix:
    documents, damaged = stored_documents(store or CertificateStore())
    return Matrix(tuple(_row(cell, documents) for cell in list_cells(model_path, model_name)), tuple(damaged))
