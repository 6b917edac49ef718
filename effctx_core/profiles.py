"""Runtime profiles: named TOML documents that fix everything changing KV contents or
capacity. This module holds the record; backends/profile_loader.py reads, checks and
finds them (built-in profiles ship in `effctx_core/builtin_profiles/`; user profiles live
in `<platformdirs user config dir>/effctx/profiles/NAME.toml`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

from effctx_core.errors import EffctxError

DEFAULT_PROFILE_NAME = "exact"


class ProfileError(EffctxError):
    pass


def default_threads() -> int:
    # llama.cpp spins its threads; more threads than free cores halves decode speed
    # (measured: 2 threads with one of 2 cores busy decode 21 tok/s, against 53 idle).
    return max(1, len(os.sched_getaffinity(0)))


@dataclass(frozen=True)
class ResidencyConfig:
    """A profile's residency section: the policy and its windows (checked, with the policy
    registry, by residency.config.check_residency where profiles are loaded)."""

    policy: str = "none"
    # Whole blocks of the default block_size, so `policy = "streaming"` alone is valid.
    sink_tokens: int = 32
    recent_tokens: int = 992
    budget: int = 0  # tokens; 0 = the context size
    block_size: int = 32
    # How many tokens one decode slide makes room for: each slide makes llama.cpp
    # re-rotate every shifted key, so sliding a token at a time would cost that per token.
    slide_tokens: int = 64

    @property
    def identity_key(self) -> str:
        """The policy and the parameters that decide which tokens its cache keeps."""
        return f"{self.policy}:{self.sink_tokens}:{self.recent_tokens}:{self.budget}:{self.block_size}"


@dataclass(frozen=True)
class Profile:
    """A plain record: the settings every backend shares, and the backend's own typed
    options (`[llama]`, `[openvino]`, `[llama-server]` in TOML). It checks nothing itself:
    profiles are validated where they are loaded (backends/profile_loader.py)."""

    name: str = DEFAULT_PROFILE_NAME
    description: str = ""
    backend: str = "llama"
    model: str | None = None
    n_ctx: int = 4096
    n_batch: int = 512
    threads: int = 0
    kv_cache_type_k: str = "f16"
    kv_cache_type_v: str = "f16"
    residency: ResidencyConfig = field(default_factory=ResidencyConfig)
    # The backend's spec's options dataclass; None (a profile made in code) is its defaults.
    backend_options: Any = None
    # The backend table as the profile's TOML wrote it (sorted pairs, values as written):
    # a certificate's profile digest has always been computed from it, so certificates
    # made before the tables were typed keep counting.
    backend_table: tuple[tuple[str, object], ...] = ()

    @property
    def n_threads(self) -> int:
        return self.threads or default_threads()

    @property
    def budget_tokens(self) -> int:
        return self.residency.budget or self.n_ctx

    def with_changes(self, **changes: Any) -> "Profile":
        """A copy with fields changed; a name that is not the profile's own is one of its
        backend options (`with_changes(swa_full=False)`), which it then must carry."""
        own = {f.name for f in fields(self)}
        options = {k: changes.pop(k) for k in list(changes) if k not in own}
        if options:
            if self.backend_options is None:
                raise TypeError(f"profile {self.name!r} carries no backend options to change "
                                f"({', '.join(options)})")
            changes["backend_options"] = replace(self.backend_options, **options)
        return replace(self, **changes)


DEFAULT_PROFILE = Profile()
