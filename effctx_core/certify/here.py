"""Does a stored certificate count for this cell on this machine?

It counts when it was measured on this machine (same machine id), for the same model
file (sha256), the same backend at the same version, and the same profile contents
(profile digest). The certificate's status is not part of the answer: a failed
certificate that counts here says that this cell failed here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Here:
    """The cell the caller is about to run, on this machine."""

    machine_id: str
    backend: str
    backend_version: str
    model_sha256: str
    profile_name: str
    profile_digest: str


def why_not_here(doc: dict, here: Here) -> str | None:
    """None when the (already loaded and checked) certificate counts for `here`, else
    the first reason it does not, as a phrase: machine, model, backend, profile."""
    hardware = doc["hardware"]
    cell = doc["cell"]
    if hardware["machine_id"] != here.machine_id:
        return f"made on another machine ({hardware['cpu_model']}, {hardware['cores']} cores)"
    sha = cell["model"]["sha256"]
    if sha != here.model_sha256:
        return f"for another model (sha256 {sha[:12]}…)"
    backend, version = cell["backend"], cell["backend_version"]
    if backend != here.backend:
        return f"for {backend} {version}, this is {here.backend} {here.backend_version}"
    if version != here.backend_version:
        return f"for {backend} {version}, this is {here.backend_version}"
    if cell["profile"] != here.profile_name:
        return f"for profile '{cell['profile']}', this is '{here.profile_name}'"
    if cell["profile_digest"] != here.profile_digest:
        return f"for another version of profile '{cell['profile']}'"
    return None
