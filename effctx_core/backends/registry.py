"""The one list of backends: their names, the package each lives in, and what they check
in a profile. A backend's package is imported only when it is used, so a command loads
only the runtime it needs, and a profile can be checked without loading any runtime."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from effctx_core.errors import EffctxError

if TYPE_CHECKING:
    from effctx_core.backends.conformance import ContractVariant
    from effctx_core.contract import Backend
    from effctx_core.profiles import Profile


@dataclass(frozen=True)
class BackendEntry:
    name: str
    summary: str
    # The package holding backend.py (the Backend class) and settings.py (its profile
    # checks); None for a backend the design names that this build does not ship.
    package: str | None
    backend_class: str = ""
    missing: str = ""  # why a backend without a package cannot run

    @property
    def available(self) -> bool:
        return self.package is not None


REGISTRY: dict[str, BackendEntry] = {
    entry.name: entry for entry in (
        BackendEntry("llama", "llama-cpp-python (llama.cpp)", "effctx_core.backends.llama", "LlamaBackend"),
        BackendEntry("openvino", "openvino-genai (OpenVINO)", "effctx_core.backends.openvino", "OpenVINOBackend"),
        BackendEntry("llama-server", "llama.cpp's llama-server over HTTP", "effctx_core.backends.llama_server",
                     "LlamaServerBackend"),
    )
}
# The backends this build can run.
BACKENDS = tuple(name for name, e in REGISTRY.items() if e.available)


def entry(name: str) -> BackendEntry:
    found = REGISTRY.get(name)
    if found is None:
        raise EffctxError(f"unknown backend {name!r} (available: {', '.join(BACKENDS)})")
    if found.package is None:
        raise EffctxError(f"backend {name!r} cannot run here: {found.missing}")
    return found


def get_backend(name: str) -> "Backend":
    found = entry(name)
    module = importlib.import_module(f"{found.package}.backend")
    backend: Backend = getattr(module, found.backend_class)()
    return backend


def _settings(name: str):
    return importlib.import_module(f"{entry(name).package}.settings")


def profile_problems(profile: "Profile", where: str) -> list[str]:
    """What the profile's backend finds wrong with its settings, one line each."""
    problems: list[str] = _settings(profile.backend).check_profile(profile, where)
    return problems


def backend_keys(name: str) -> frozenset[str]:
    """The profile's top-level keys this backend reads (the others belong to another backend)."""
    keys: frozenset[str] = _settings(name).PROFILE_KEYS
    return keys


def quantized_kv_types(name: str) -> tuple[str, ...]:
    """The K/V cache element types below 16 bits this backend takes, by its own names."""
    types: tuple[str, ...] = _settings(name).QUANTIZED_TYPES
    return types


def contract_variants(name: str) -> dict[str, "ContractVariant"]:
    """The backend's ways of running a session that the conformance suite runs apart (the
    first is the backend's default)."""
    from effctx_core.backends.conformance import ContractVariant

    variants: dict[str, ContractVariant] = getattr(_settings(name), "CONTRACT_VARIANTS", {"": ContractVariant()})
    return variants
