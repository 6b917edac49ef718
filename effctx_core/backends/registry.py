"""The one list of backends: each backend package's BackendSpec, by name. A spec holds what
the backend declares about profiles (its typed options, their checks, its K/V type names,
its identity settings, its conformance variants) and imports no runtime: a profile is
checked without loading llama.cpp or OpenVINO, and a backend's runtime is imported only
when `create` makes the Backend that opens a session."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeAlias

from effctx_core.contract import Backend
from effctx_core.errors import EffctxError
from effctx_core.profiles import Profile
from effctx_core.residency.blocks import BlockTable

if TYPE_CHECKING:
    from effctx_core.backends.conformance import ContractVariant
    from effctx_core.backends.table import ValueCheck
    from effctx_core.identity import Setting

# A backend as effctx drives it: sessions opened from a Profile, residency plans given as
# block tables (the contract leaves both open: it sits below profiles and residency).
CellBackend: TypeAlias = Backend[Profile, BlockTable]


@dataclass(frozen=True)
class BackendSpec:
    name: str  # also the name of its profile table: [llama], [openvino], [llama-server]
    summary: str
    options: type  # the frozen dataclass of the backend's own table, with its defaults
    # What is wrong with a profile for this backend, one line each, given its options
    # (already type-checked against the table).
    check: Callable[[Profile, str], list[str]]
    # The backend's rule for one well-typed value of its table, or None.
    value_check: ValueCheck | None
    # The settings that change what the cache holds for a token list: the runtime identity's.
    kv_settings: Callable[[Profile], dict[str, Setting]]
    quantized_kv_types: tuple[str, ...]  # the K/V cache element types below 16 bits, by its names
    # The ways of running its sessions that the conformance suite runs apart (the first is the default).
    contract_variants: Mapping[str, ContractVariant]
    backend: str  # "module:Class" of the Backend, imported by create()
    # Keys an earlier effctx read at a profile's top level that now belong in this table.
    moved_keys: tuple[str, ...] = ()

    def option_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self.options))

    def options_of(self, profile: Profile) -> Any:
        """The profile's typed options (an instance of `options`)."""
        from effctx_core.backends.table import options_of

        return options_of(profile, self.options, self.name)

    def create(self) -> CellBackend:
        module, _, cls = self.backend.partition(":")
        backend: CellBackend = getattr(importlib.import_module(module), cls)()
        return backend


# Each backend package's spec module: small, importing no runtime.
SPEC_MODULES: dict[str, str] = {
    "llama": "effctx_core.backends.llama.spec",
    "openvino": "effctx_core.backends.openvino.spec",
    "llama-server": "effctx_core.backends.llama_server.spec",
}
BACKENDS = tuple(SPEC_MODULES)


def spec(name: str) -> BackendSpec:
    module = SPEC_MODULES.get(name)
    if module is None:
        raise EffctxError(f"unknown backend {name!r} (available: {', '.join(BACKENDS)})")
    found: BackendSpec = importlib.import_module(module).SPEC
    return found


def get_backend(name: str) -> CellBackend:
    return spec(name).create()


def quantized_kv_types(name: str) -> tuple[str, ...]:
    """The K/V cache element types below 16 bits this backend takes, by its own names."""
    return spec(name).quantized_kv_types


def contract_variants(name: str) -> Mapping[str, ContractVariant]:
    """The backend's ways of running a session that the conformance suite runs apart (the
    first is the backend's default)."""
    return spec(name).contract_variants
