"""The llama-server backend: llama.cpp's HTTP server behind the cell contract, started by
effctx from its own llama.cpp build (one server and one slot per session), or attached
to a running one through the profile's `[llama-server] server_url`.

Tokenization is llama.cpp's own, from a vocabulary-only load of the same GGUF with the
binding built from the same llama.cpp commit, so the tape is the llama backend's tape;
an attached server proves it tokenizes the same before it is used."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from effctx_core.backends.cache_session import check_trained_context
from effctx_core.backends.common.policy import NoEditExecutor, check_policy
from effctx_core.backends.gguf.facts import check_gguf_file
from effctx_core.backends.gguf.runtime import load_model
from effctx_core.backends.llama_cpp_build import require_build
from effctx_core.backends.llama_server.client import ServerClient
from effctx_core.backends.llama_server.connection import (
    attached_facts,
    connect,
    missing_build,
    server_version,
    started_version,
)
from effctx_core.backends.llama_server.info import BACKEND, model_info
from effctx_core.backends.llama_server.session import LlamaServerSession
from effctx_core.backends.llama_server.settings import options_of, started_profile
from effctx_core.contract import Baseline, CapacityReport, ModelInfo, RuntimeEviction, Session
from effctx_core.errors import BackendUnavailableError
from effctx_core.models import ProgressFn

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

NO_SLOT_DIR = ("attached without slot_dir: effctx cannot read the server's slot files (set [llama-server] slot_dir "
               "to the server's --slot-save-path)")


class LlamaServerBackend:
    name = BACKEND

    def version(self) -> str:
        return started_version()

    def check_model(self, path: Path) -> None:
        check_gguf_file(path)

    def unavailable(self, profile: Profile) -> str | None:
        if options_of(profile).attached:
            return None  # the server runs elsewhere: whether it answers is open's to find out
        return missing_build()

    def pending_preparation(self, model_path: Path, profile: Profile) -> str | None:
        return None  # the server reads the GGUF as it is

    def prepare(self, model_path: Path, profile: Profile, progress: ProgressFn | None = None) -> None:
        pass

    def _check_available(self, profile: Profile) -> None:
        reason = self.unavailable(profile)
        if reason is not None:
            raise BackendUnavailableError(reason)

    def describe(self, model_path: Path, profile: Profile) -> ModelInfo:
        """From the GGUF and the profile; an attached server is asked for its build and
        slot size, a started one is not started."""
        self._check_available(profile)
        vocab = load_model(Path(model_path), vocab_only=True)
        check_trained_context(profile.n_ctx, vocab.facts.context_length)
        options = options_of(profile)
        if options.attached:
            facts = attached_facts(ServerClient(options.server_url, options.timeout_s))
            return model_info(vocab, profile, facts.version, facts.slot_n_ctx, "attached",
                              None if options.slot_dir else NO_SLOT_DIR)
        version = server_version(require_build("the llama-server backend"))
        return model_info(vocab, profile, version, profile.n_ctx, "cpu", None)

    def open(self, model_path: Path, profile: Profile) -> LlamaServerSession:
        self._check_available(profile)
        vocab = load_model(Path(model_path), vocab_only=True)
        check_trained_context(profile.n_ctx, vocab.facts.context_length)
        connection = connect(Path(model_path), profile, vocab)
        try:
            # effctx's build has only the CPU backend; an attached server may run anywhere.
            device = "attached" if connection.started is None else "cpu"
            info = model_info(vocab, profile, connection.facts.version, connection.facts.slot_n_ctx, device,
                              None if connection.slot.folder is not None else NO_SLOT_DIR)
            return LlamaServerSession(vocab, connection, profile, info)
        except BaseException:
            connection.close()
            raise

    def runtime_eviction(self, profile: Profile) -> RuntimeEviction | None:
        # The slot keeps everything it is sent (no context shift, no prompt cache of its
        # own): nothing to model an eviction from. That the map is modeled, with only
        # cache_n as proof, the capability notes say.
        return None

    def check_policy(self, info: ModelInfo, policy: str) -> None:
        check_policy(info.capabilities, policy)

    def residency_executor(self, session: Session) -> NoEditExecutor:
        return NoEditExecutor("llama-server", "slot")

    def baseline(self, model_path: Path, profile: Profile) -> Baseline:
        from effctx_core.backends.llama_server.baseline import LlamaServerBaseline

        self._check_available(started_profile(profile))
        return LlamaServerBaseline(Path(model_path), profile)

    def capacity_report(self, info: ModelInfo, profile: Profile, memory_bytes: int) -> CapacityReport:
        from effctx_core.backends.gguf.capacity import capacity_report

        # The same llama.cpp cache as the llama backend's, of the slot's size (the tape
        # holds one token less: a prompt may not fill the slot).
        slot = next(limit.tokens for limit in info.limits if limit.name == "slot") + 1
        return capacity_report(replace(info, n_ctx=slot), profile, memory_bytes)
