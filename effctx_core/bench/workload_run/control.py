"""The control a workload runs beside: what a user would run instead of effctx."""

from __future__ import annotations

from pathlib import Path

from effctx_core.backends.profile_loader import check_profile
from effctx_core.backends.registry import get_backend, spec
from effctx_core.contract import Baseline
from effctx_core.errors import EffctxError
from effctx_core.profiles import Profile

# Controls that can stand beside any llama.cpp cell: the server a user would run instead.
CONTROL_BACKENDS = ("llama-server",)


def control_baseline(model_path: Path, profile: Profile, control_backend: str | None) -> Baseline:
    """The control of a run: the profile's own backend's (what its library does by
    itself), or another backend's plain server on the profile's llama.cpp settings."""
    if control_backend is None or control_backend == profile.backend:
        return get_backend(profile.backend).baseline(model_path, profile)
    if control_backend not in CONTROL_BACKENDS:
        raise EffctxError(f"no {control_backend!r} control (there is: {', '.join(CONTROL_BACKENDS)})")
    source, control = spec(profile.backend).options_of(profile), spec(control_backend)
    if getattr(source, "rpc_workers", ()):
        raise EffctxError(f"the {control_backend} control runs on this machine alone; profile {profile.name!r} "
                          "runs on RPC workers")
    # The profile's own settings that the control's table has too (llama.cpp's context settings).
    shared = {name: getattr(source, name) for name in control.option_names() if hasattr(source, name)}
    try:
        same = check_profile(Profile(name=profile.name, description=profile.description, backend=control_backend,
                                     n_ctx=profile.n_ctx, n_batch=profile.n_batch, threads=profile.threads,
                                     kv_cache_type_k=profile.kv_cache_type_k, kv_cache_type_v=profile.kv_cache_type_v,
                                     backend_options=control.options(**shared)))
    except EffctxError as exc:
        raise EffctxError(f"the {control_backend} control cannot run profile {profile.name!r}'s settings: {exc}") from None
    return get_backend(control_backend).baseline(model_path, same)
