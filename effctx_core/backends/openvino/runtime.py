"""Process-wide OpenVINO plumbing: one Core, compiled models shared by sessions, the
plugin configuration a profile asks for, and the converted IR a GGUF needs."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import openvino as ov

from effctx_core.backends.openvino.convert import (
    CachedIR,
    ConvertedModel,
    cached_conversion,
    convert_gguf,
    first_line,
)
from effctx_core.backends.openvino.settings import OpenVINOOptions, options_of
from effctx_core.errors import EffctxError
from effctx_core.models import ProgressFn

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

DEVICE = "CPU"

_core: ov.Core | None = None
_compiled: dict[tuple[str, tuple[tuple[str, str], ...]], ov.CompiledModel] = {}
_lock = threading.Lock()


def core() -> ov.Core:
    global _core
    with _lock:
        if _core is None:
            _core = ov.Core()
        return _core


def plugin_config(profile: Profile, options: OpenVINOOptions) -> dict[str, str]:
    """The CPU plugin properties of a profile: threads, inference precision and the K and V
    cache element types (set apart: KEY_ / VALUE_CACHE_PRECISION)."""
    config = {
        "INFERENCE_NUM_THREADS": str(profile.n_threads),
        "KEY_CACHE_PRECISION": profile.kv_cache_type_k,
        "VALUE_CACHE_PRECISION": profile.kv_cache_type_v,
    }
    if options.inference_precision != "auto":
        config["INFERENCE_PRECISION_HINT"] = options.inference_precision
    return config


def compiled_model(xml: Path, config: dict[str, str]) -> ov.CompiledModel:
    """The IR compiled once per process and configuration; each session makes its own
    infer request (and with it its own cache) from it."""
    key = (str(xml), tuple(sorted(config.items())))
    with _lock:
        found = _compiled.get(key)
    if found is not None:
        return found
    try:
        compiled = core().compile_model(str(xml), DEVICE, config)
    except RuntimeError as exc:
        raise EffctxError(f"OpenVINO could not compile {xml}: {first_line(exc)}") from None
    with _lock:
        _compiled[key] = compiled
    return compiled


def converted(model_path: Path, profile: Profile, progress: ProgressFn | None = None) -> ConvertedModel:
    """The IR of the GGUF for this profile's weight format: from the cache when its files
    match its manifest, else converted now."""
    return convert_gguf(Path(model_path), options_of(profile).weights, progress)


def cached_ir(model_path: Path, profile: Profile) -> CachedIR:
    """What the cache holds for this profile's IR (nothing is converted)."""
    return cached_conversion(Path(model_path), options_of(profile).weights)


def ready_ir(model_path: Path, profile: Profile) -> ConvertedModel:
    """The IR a session of `profile` runs: a converted folder whose files do not match its
    manifest (a .bin deleted or half copied) is converted again, before OpenVINO reads it."""
    return converted(model_path, profile)


def infer_inputs(ids: Any, past: int) -> dict[str, Any]:
    """The stateful IR's inputs for `ids` appended to `past` cached tokens."""
    n = len(ids)
    return {
        "input_ids": np.asarray(ids, dtype=np.int64).reshape(1, n),
        "attention_mask": np.ones((1, past + n), dtype=np.int64),
        "position_ids": np.arange(past, past + n, dtype=np.int64).reshape(1, n),
        "beam_idx": np.zeros(1, dtype=np.int32),
    }

