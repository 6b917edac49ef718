"""Cells: backend × runtime version × device × model × profile, with what each can do.

A cell is listed whether or not it can run here: one that cannot says why, so a mode
is never hidden and never advertised without a capability report behind it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from effctx_core.backends.registry import BACKENDS, get_backend
from effctx_core.errors import EffctxError
from effctx_core.contract import ModelInfo
from effctx_core.profiles import Profile, available_profiles, load_profile

# Backends the design names that this build does not ship yet.
PLANNED_BACKENDS = {"openvino": "openvino-genai is not part of this build yet"}


@dataclass(frozen=True)
class Cell:
    backend: str
    profile: str
    device: str
    model: str
    runnable: bool
    reason: str  # why it cannot run, or what it offers
    info: ModelInfo | None = None
    profile_record: Profile | None = None

    def to_dict(self) -> dict:
        out = {"backend": self.backend, "profile": self.profile, "device": self.device, "model": self.model,
               "runnable": self.runnable, "reason": self.reason}
        if self.info is not None:
            caps = self.info.capabilities
            out.update({
                "backend_version": self.info.backend_version,
                "n_ctx": self.info.n_ctx,
                "identity": self.info.identity.digest(),
                "capabilities": {"position_shift": caps.position_shift, "quantized_v_cache": caps.quantized_v_cache,
                                 "exact_snapshot_replay": caps.exact_snapshot_replay,
                                 "safe_rollback": caps.safe_rollback_tokens, "reasons": caps.reasons},
                "limits": [{"name": lim.name, "tokens": lim.tokens, "reason": lim.reason} for lim in self.info.limits],
            })
        if self.profile_record is not None:
            p = self.profile_record
            out["settings"] = {"kv_cache_type_k": p.kv_cache_type_k, "kv_cache_type_v": p.kv_cache_type_v,
                               "flash_attn": p.flash_attn, "swa_full": p.swa_full, "policy": p.residency.policy}
        return out


def list_cells(model_path: Path, model_name: str) -> list[Cell]:
    """Every profile on every backend of this build, described by the backend itself,
    plus the planned backends as cells that cannot run."""
    cells = []
    for backend_name in BACKENDS:
        backend = get_backend(backend_name)
        for name, source in available_profiles().items():
            try:
                profile = load_profile(source if source != "built-in" else name)
            except EffctxError as exc:
                cells.append(Cell(backend_name, name, "cpu", model_name, False, str(exc)))
                continue
            if profile.backend != backend_name:
                continue
            try:
                info = backend.describe(model_path, profile)
            except EffctxError as exc:
                cells.append(Cell(backend_name, name, "cpu", model_name, False, str(exc), profile_record=profile))
                continue
            reason = _offer(info, profile)
            if profile.residency.evicts and not info.capabilities.position_shift:
                cells.append(Cell(backend_name, name, "cpu", model_name, False,
                                  f"the {profile.residency.policy} policy needs position shift: "
                                  f"{info.capabilities.reasons['position_shift']}", info, profile))
            elif profile.residency.policy == "scored":
                cells.append(Cell(backend_name, name, "cpu", model_name, False,
                                  f"the scored policy needs attention scores; {backend_name} supplies none", info, profile))
            else:
                cells.append(Cell(backend_name, name, "cpu", model_name, True, reason, info, profile))
    for name, why in PLANNED_BACKENDS.items():
        cells.append(Cell(name, "-", "cpu", model_name, False, why))
    return cells


def _offer(info: ModelInfo, profile: Profile) -> str:
    if profile.residency.evicts:
        return (f"no length limit: the {profile.residency.policy} policy keeps at most "
                f"{profile.budget_tokens} tokens resident")
    limit = info.max_context
    return f"up to {limit.tokens} tokens ({limit.reason})"
