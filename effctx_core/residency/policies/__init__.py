"""Residency planners, one policy a module, and the registry that builds them from a profile."""

from __future__ import annotations

from typing import TYPE_CHECKING

from effctx_core.contract import Capabilities
from effctx_core.errors import EffctxError, UnsupportedFeatureError
from effctx_core.residency.policies.base import Planner, PlannerCaps
from effctx_core.residency.policies.budget import BudgetPlanner
from effctx_core.residency.policies.none import NonePlanner
from effctx_core.residency.policies.scored import ScoredPlanner
from effctx_core.residency.policies.streaming import StreamingPlanner

if TYPE_CHECKING:
    from effctx_core.profiles import ResidencyConfig

# Every policy a profile can name, by name (in the order error messages list them).
POLICIES: dict[str, type[Planner]] = {cls.name: cls for cls in (NonePlanner, StreamingPlanner, BudgetPlanner, ScoredPlanner)}


def policy_class(policy: str) -> type[Planner]:
    try:
        return POLICIES[policy]
    except KeyError:
        raise EffctxError(f"unknown residency policy {policy!r} (known: {', '.join(POLICIES)})") from None


def keeps_budget(policy: str) -> bool:
    """Whether the named policy's plans keep to a token budget (False for a name that is
    no policy of effctx's, such as a runtime's own eviction)."""
    cls = POLICIES.get(policy)
    return cls is not None and cls.keeps_budget


def planner_caps(capabilities: Capabilities) -> PlannerCaps:
    """What a backend's capability report lets a planner use."""
    return PlannerCaps(attention_scores=capabilities.attention_scores.supported)


def check_planner(policy: str, caps: PlannerCaps) -> None:
    """Refuse a policy whose declared needs the backend does not meet: a scored policy
    ranks by attention scores, so it is refused where the backend supplies none, never faked."""
    missing = policy_class(policy).check_caps(caps)
    if missing:
        raise UnsupportedFeatureError(
            f"the {policy} policy needs {' and '.join(missing)}, and this backend does not supply them"
        )


def planner_for(config: ResidencyConfig, caps: PlannerCaps) -> Planner:
    check_planner(config.policy, caps)
    return policy_class(config.policy).from_config(config)


__all__ = [
    "POLICIES", "Planner", "PlannerCaps", "check_planner", "keeps_budget", "planner_caps", "planner_for",
    "policy_class", "NonePlanner", "StreamingPlanner", "BudgetPlanner", "ScoredPlanner",
]
