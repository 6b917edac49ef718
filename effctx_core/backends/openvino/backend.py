"""The OpenVINO backend: the GGUF converted to an OpenVINO IR by effctx, run either on the
IR's own stateful cache (plain OpenVINO) or on openvino-genai's paged pipeline.
Tokenization is llama.cpp's (a vocabulary-only load of the same GGUF), so both backends
hold the same token tape and a swap moves it exactly."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import openvino as ov

from effctx_core.backends.common.policy import NoEditExecutor, check_policy
from effctx_core.backends.gguf.facts import check_gguf_file
from effctx_core.backends.gguf.runtime import load_model
from effctx_core.backends.openvino.info import model_info
from effctx_core.backends.openvino.runtime import cached_ir, converted, ready_ir
from effctx_core.backends.openvino.settings import BLOCK_TOKENS, options_of
from effctx_core.contract import Baseline, CapacityReport, ModelInfo, RuntimeEviction, Session
from effctx_core.models import ProgressFn

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

# What a first open costs on 2 CPU cores (the default model; measured 22-26 s,
# 3.4 GB peak memory, 272 MiB of int8 weights).
CONVERSION_COST = "converts the GGUF to OpenVINO IR {when} (about 25 s and 3.5 GB of memory for the default model)"


class OpenVINOBackend:
    name = "openvino"

    def version(self) -> str:
        return str(ov.get_version()).split("-")[0]

    def check_model(self, path: Path) -> None:
        check_gguf_file(path)

    def unavailable(self, profile: Profile) -> str | None:
        return None  # openvino-genai installs from wheels with effctx

    def pending_preparation(self, model_path: Path, profile: Profile) -> str | None:
        """What the first open of this profile will do before it can run (and why, when a
        converted folder is there but its files do not match its manifest), or None."""
        cached = cached_ir(model_path, profile)
        if cached.model is not None:
            return None
        return CONVERSION_COST.format(when=f"again, since {cached.problem}" if cached.problem else "first")

    def prepare(self, model_path: Path, profile: Profile, progress: ProgressFn | None = None) -> None:
        converted(model_path, profile, progress)

    def open(self, model_path: Path, profile: Profile) -> Session:
        vocab = load_model(Path(model_path), vocab_only=True)
        ir = ready_ir(model_path, profile)
        if options_of(profile).pipeline == "paged":
            from effctx_core.backends.openvino.paged import OpenVINOPagedSession

            return OpenVINOPagedSession(vocab, ir, profile, self.version())
        from effctx_core.backends.openvino.stateful import OpenVINOStatefulSession

        return OpenVINOStatefulSession(vocab, ir, profile, self.version())

    def describe(self, model_path: Path, profile: Profile) -> ModelInfo:
        """From the GGUF's metadata and the profile: nothing is converted or compiled."""
        vocab = load_model(Path(model_path), vocab_only=True)
        pending = self.pending_preparation(model_path, profile)
        return model_info(vocab, profile, self.version(), f"not converted yet: the first open {pending}" if pending
                          else "converted IR in the cache")

    def runtime_eviction(self, profile: Profile) -> RuntimeEviction | None:
        options = options_of(profile)
        if options.pipeline != "paged" or not options.evicts:
            return None
        return RuntimeEviction("openvino-genai eviction", options.start_size, options.recent_size,
                               options.max_cache_size, BLOCK_TOKENS)

    def check_policy(self, info: ModelInfo, policy: str) -> None:
        check_policy(info.capabilities, policy)

    def residency_executor(self, session: Session) -> NoEditExecutor:
        return NoEditExecutor("OpenVINO", "cache")

    def baseline(self, model_path: Path, profile: Profile) -> Baseline:
        from effctx_core.backends.openvino.baseline import OpenVINOBaseline

        return OpenVINOBaseline(Path(model_path), profile)

    def capacity_report(self, info: ModelInfo, profile: Profile, memory_bytes: int) -> CapacityReport:
        from effctx_core.backends.openvino.capacity import capacity_report

        return capacity_report(info, profile, memory_bytes)
