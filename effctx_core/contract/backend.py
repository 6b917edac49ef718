"""The backend protocol: what a runtime says about a model and a profile before anything
is loaded, and how it opens sessions, executors and baselines.

The contract sits below the profile record and the residency blocks (a profile names its
backend's options; the blocks are the residency layer's), so the protocol is generic in
both: `Backend[Profile, BlockTable]` is a backend as effctx drives it
(backends.registry.CellBackend)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol, TypeVar

from effctx_core.contract.records import CapacityReport, ModelInfo, RuntimeEviction

if TYPE_CHECKING:
    from effctx_core.contract.baseline import Baseline
    from effctx_core.contract.session import ResidencyExecutor, Session

Profile = TypeVar("Profile", contravariant=True)
Table = TypeVar("Table", contravariant=True)


class Backend(Protocol[Profile, Table]):
    name: str

    def version(self) -> str: ...

    def check_model(self, path: Path) -> None:
        """Raise ModelFileError (one line) unless `path` holds a model in a format this
        backend reads; called before anything is loaded."""
        ...

    def unavailable(self, profile: Profile) -> str | None:
        """Why `profile` cannot run on this machine at all (a build or a binary it needs is
        not there), or None; open and describe then raise BackendUnavailableError."""
        ...

    def pending_preparation(self, model_path: Path, profile: Profile) -> str | None:
        """What the first open of `profile` must do before it can run and what it costs,
        as a phrase ("converts the GGUF to ... (about 25 s)"), or None when nothing is left."""
        ...

    def prepare(self, model_path: Path, profile: Profile, progress: Callable[[str, int, int], None] | None = None) -> None:
        """Do that preparation now, reporting progress; a no-op when nothing is left."""
        ...

    def describe(self, model_path: Path, profile: Profile) -> ModelInfo:
        """What a session of `profile` would be, without preparing or opening one."""
        ...

    def open(self, model_path: Path, profile: Profile) -> Session: ...

    def runtime_eviction(self, profile: Profile) -> RuntimeEviction | None:
        """How the runtime evicts by itself under this profile, or None when it keeps
        everything it is given: the residency map is then modeled from it."""
        ...

    def check_policy(self, info: ModelInfo, policy: str) -> None:
        """Raise UnsupportedFeatureError if this backend's executor cannot carry out the
        residency policy on a session described by `info`."""
        ...

    def residency_executor(self, session: Session) -> ResidencyExecutor[Table]: ...

    def capacity_report(self, info: ModelInfo, profile: Profile, memory_bytes: int) -> CapacityReport:
        """The KV layout of this context and what `memory_bytes` of cache buys per K/V
        type pair (each row's `tokens`: None where the backend does not model that pair),
        with the lines `effctx info` prints of it."""
        ...

    def baseline(self, model_path: Path, profile: Profile) -> "Baseline":
        """The plain loop over the runtime's own API that the benchmark holds the engine
        against: the same settings, none of the engine's bookkeeping."""
        ...
