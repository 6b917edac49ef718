"""The conformance suite's variants: the ways of running one backend's sessions that
tests/contract runs apart (in process and on RPC workers; a started and an attached
server; the stateful and the paged pipeline). Each backend's spec lists its own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ContextManager

if TYPE_CHECKING:
    from effctx_core.profiles import Profile


@dataclass(frozen=True)
class ContractVariant:
    """One way of running a backend's sessions that the conformance suite runs apart."""

    options: tuple[tuple[str, object], ...] = ()  # the backend's own options it sets
    # What the variant needs running while its tests run (workers, a server), given the
    # model and the cell's profile: a context manager that starts it, yields the backend
    # options that point at it ({"rpc_workers": ...}, {"server_url": ...}), and stops
    # it. It raises BackendUnavailableError when this machine cannot run it.
    services: Callable[[Path, Profile], ContextManager[dict[str, object]]] | None = None
