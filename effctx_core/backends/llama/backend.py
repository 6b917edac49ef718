"""The llama backend: llama-cpp-python's low-level C API behind the cell contract."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from effctx_core.backends.common.policy import check_policy
from effctx_core.backends.gguf.binding import llama_cpp
from effctx_core.backends.gguf.facts import check_gguf_file
from effctx_core.backends.gguf.runtime import load_model
from effctx_core.backends.llama.executor import LlamaResidencyExecutor
from effctx_core.backends.llama.session import LlamaSession
from effctx_core.backends.llama.settings import options_of
from effctx_core.backends.llama_cpp_build import HOW_TO_BUILD, find_build, require_build
from effctx_core.contract import Baseline, CapacityReport, ModelInfo, RuntimeEviction, Session
from effctx_core.models import ProgressFn

if TYPE_CHECKING:
    from effctx_core.backends.llama.rpc_hosted import RpcHost

    # The profile is read, never built, here: the backends sit below the profile schema.
    from effctx_core.profiles import Profile


class LlamaBackend:
    name = "llama"

    def version(self) -> str:
        return str(llama_cpp.__version__)

    def check_model(self, path: Path) -> None:
        check_gguf_file(path)

    def unavailable(self, profile: Profile) -> str | None:
        if options_of(profile).rpc_workers and find_build() is None:
            return f"rpc_workers needs effctx's llama.cpp build with RPC and llama-server ({HOW_TO_BUILD})"
        return None

    def _rpc(self, profile: Profile) -> tuple[RpcHost, str]:
        """The RPC host of the profile's workers, and the runtime version its sessions report:
        the build's commit on the workers, so that their states are never mixed with local ones."""
        from effctx_core.backends.llama.rpc_hosted import host_for

        build = require_build(f"profile {profile.name!r} (rpc_workers)")
        return host_for(profile, build), f"{self.version()}+rpc.{build.commit[:7]}"

    def pending_preparation(self, model_path: Path, profile: Profile) -> str | None:
        return None  # llama.cpp reads the GGUF as it is

    def prepare(self, model_path: Path, profile: Profile, progress: ProgressFn | None = None) -> None:
        pass

    def open(self, model_path: Path, profile: Profile) -> Session:
        if options_of(profile).rpc_workers:
            from effctx_core.backends.llama.rpc_hosted import HostedSession

            host, version = self._rpc(profile)
            return HostedSession(host, Path(model_path), profile, version)
        return LlamaSession(load_model(Path(model_path)), profile, self.version())

    def describe(self, model_path: Path, profile: Profile) -> ModelInfo:
        session = self.open(model_path, profile)
        try:
            return session.info
        finally:
            session.close()

    def runtime_eviction(self, profile: Profile) -> RuntimeEviction | None:
        return None  # llama.cpp evicts nothing by itself: effctx's executor does it

    def check_policy(self, info: ModelInfo, policy: str) -> None:
        check_policy(info.capabilities, policy)

    def residency_executor(self, session: Session) -> LlamaResidencyExecutor:
        from effctx_core.backends.llama.rpc_hosted import HostedSession

        if not isinstance(session, (LlamaSession, HostedSession)):
            raise TypeError(f"the llama executor needs a llama session, not {type(session).__name__}")
        return LlamaResidencyExecutor(session)

    def baseline(self, model_path: Path, profile: Profile) -> Baseline:
        from effctx_core.backends.llama.baseline import LlamaBaseline

        if options_of(profile).rpc_workers:
            from effctx_core.backends.llama.rpc_hosted import HostedBaseline

            host, _version = self._rpc(profile)
            return HostedBaseline(host, Path(model_path), profile)

        return LlamaBaseline(Path(model_path), profile)

    def capacity_report(self, info: ModelInfo, profile: Profile, memory_bytes: int) -> CapacityReport:
        from effctx_core.backends.gguf.capacity import capacity_report

        return capacity_report(info, profile, memory_bytes)
