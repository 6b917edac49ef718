"""A profile's residency section, checked against the policy registry (the record itself is
profiles.ResidencyConfig: a profile holds it without knowing the policies)."""

from __future__ import annotations

from effctx_core.errors import EffctxError
from effctx_core.profiles import ResidencyConfig
from effctx_core.residency.policies import POLICIES, policy_class

__all__ = ["ResidencyConfig", "check_residency", "policy_evicts"]


def policy_evicts(config: ResidencyConfig) -> bool:
    """Whether the policy takes tokens out of the cache (every policy but none)."""
    cls = POLICIES.get(config.policy)
    return cls is None or cls.evicts  # a name no policy has is refused by check_residency


def check_residency(config: ResidencyConfig, where: str) -> None:
    if config.policy not in POLICIES:
        raise EffctxError(f"{where}: unknown residency policy {config.policy!r} (known: {', '.join(POLICIES)})")
    for name in ("sink_tokens", "recent_tokens", "budget"):
        if getattr(config, name) < 0:
            raise EffctxError(f"{where}: residency.{name} must be 0 or more")
    if config.block_size < 1:
        raise EffctxError(f"{where}: residency.block_size must be at least 1")
    if config.slide_tokens < 1:
        raise EffctxError(f"{where}: residency.slide_tokens must be at least 1")
    policy_class(config.policy).check_config(config, where)
