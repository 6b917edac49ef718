"""Cells: backend × runtime version × device × model × profile, with what each can do.

A cell is listed whether or not it can run here: one that cannot says why, so a mode
is never hidden and never advertised without a capability report behind it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from effctx_core.backends.profile_loader import available_profiles, legacy_settings, load_profile
from effctx_core.backends.registry import BACKENDS, CellBackend, get_backend
from effctx_core.contract import ModelInfo
from effctx_core.errors import EffctxError, UnsupportedFeatureError
from effctx_core.profiles import Profile
from effctx_core.residency.config import ResidencyConfig, policy_evicts
from effctx_core.residency.policies import check_planner, planner_caps


def check_cell(backend: CellBackend, info: ModelInfo, config: ResidencyConfig) -> None:
    """Raise UnsupportedFeatureError unless the residency policy can run on this session:
    the planner's needs (scores), then the backend executor's (for llama.cpp, shifts).
    The engine opens a cell only after this check, and the cells list says its reason."""
    check_planner(config.policy, planner_caps(info.capabilities))
    backend.check_policy(info, config.policy)


def residency_source(info: ModelInfo) -> str:
    """What every view of this cell's residency map says it is: observed or modeled, as
    the backend's capability report sets it (with its reason)."""
    return info.capabilities.residency_map.source


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
    # What the first open does before the cell runs, and what it costs (a conversion).
    preparation: str | None = None
    # observed or modeled (residency_source); None when the backend could not describe it.
    residency: str | None = None

    def to_dict(self) -> dict:
        out = {"backend": self.backend, "profile": self.profile, "device": self.device, "model": self.model,
               "runnable": self.runnable, "reason": self.reason, "preparation": self.preparation,
               "residency": self.residency}
        if self.info is not None:
            out.update({
                "backend_version": self.info.backend_version,
                "n_ctx": self.info.n_ctx,
                "identity": self.info.identity.digest(),
                "capabilities": self.info.capabilities.to_dict(),
                "limits": [{"name": lim.name, "tokens": lim.tokens, "reason": lim.reason} for lim in self.info.limits],
            })
        if self.profile_record is not None:
            p = self.profile_record
            legacy = legacy_settings(p)
            out["settings"] = {"kv_cache_type_k": p.kv_cache_type_k, "kv_cache_type_v": p.kv_cache_type_v,
                               "flash_attn": legacy["flash_attn"], "swa_full": legacy["swa_full"],
                               "policy": p.residency.policy}
        return out


UNKNOWN_DEVICE = "-"


def list_cells(model_path: Path, model_name: str) -> list[Cell]:
    """Every profile on every backend of the registry, described by the backend itself; a
    profile that cannot be read is one cell that says why."""
    profiles: list[tuple[str, Profile | EffctxError]] = []
    for name, source in available_profiles().items():
        try:
            profiles.append((name, load_profile(source if source != "built-in" else name)))
        except EffctxError as exc:
            profiles.append((name, exc))
    cells = []
    for backend_name in BACKENDS:
        backend = get_backend(backend_name)
        cells += [_cell(backend, name, profile, model_path, model_name) for name, profile in profiles
                  if isinstance(profile, Profile) and profile.backend == backend_name]
    cells += [Cell("-", name, UNKNOWN_DEVICE, model_name, False, str(p)) for name, p in profiles
              if isinstance(p, EffctxError)]
    return cells


def _cell(backend: CellBackend, name: str, profile: Profile, model_path: Path, model_name: str) -> Cell:
    try:
        info = backend.describe(model_path, profile)
    except EffctxError as exc:
        return Cell(backend.name, name, UNKNOWN_DEVICE, model_name, False, str(exc), profile_record=profile)
    residency = residency_source(info)
    try:
        check_cell(backend, info, profile.residency)
    except UnsupportedFeatureError as exc:
        return Cell(backend.name, name, info.device, model_name, False, str(exc), info, profile, residency=residency)
    return Cell(backend.name, name, info.device, model_name, True, _offer(info, profile), info, profile,
                backend.pending_preparation(model_path, profile), residency)


def _offer(info: ModelInfo, profile: Profile) -> str:
    """What the cell allocates: not a claim about what it holds well (only a certificate
    says that)."""
    if policy_evicts(profile.residency):
        return (f"the {profile.residency.policy} policy keeps at most {profile.budget_tokens} tokens resident "
                "and evicts the rest")
    return info.max_context.reason
