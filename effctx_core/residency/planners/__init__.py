"""Residency planners, one policy a module, and the registry that builds them from a profile."""

from __future__ import annotations

from effctx_core.contract import Capabilities
from effctx_core.errors import EffctxError, UnsupportedFeatureError
from effctx_core.residency.config import ResidencyConfig
from effctx_core.residency.planners.base import Planner, PlannerCaps
from effctx_core.residency.planners.budget import BudgetPlanner
from effctx_core.residency.planners.none import NonePlanner
from effctx_core.residency.planners.scored import ScoredPlanner
from effctx_core.residency.planners.streaming import StreamingPlanner


def planner_caps(capabilities: Capabilities) -> PlannerCaps:
    """What a backend's capability report lets a planner use."""
    return PlannerCaps(attention_scores=capabilities.attention_scores.supported)


def check_planner(policy: str, caps: PlannerCaps) -> None:
    """The policies that need something from the backend, and what: a scored policy ranks
    by attention scores, so it is refused where the backend supplies none, never faked."""
    if policy == "scored" and not caps.attention_scores:
        raise UnsupportedFeatureError(
            "the scored policy needs attention scores, and this backend does not supply them"
        )


def planner_for(config: ResidencyConfig, caps: PlannerCaps) -> Planner:
    check_planner(config.policy, caps)
    if config.policy == "none":
        return NonePlanner()
    if config.policy == "streaming":
        return StreamingPlanner(config.sink_tokens, config.recent_tokens)
    if config.policy == "budget":
        return BudgetPlanner(config.sink_tokens, config.recent_tokens)
    if config.policy == "scored":
        return ScoredPlanner(config.sink_tokens, config.recent_tokens)
    raise EffctxError(f"unknown residency policy {config.policy!r}")


__all__ = ["Planner", "PlannerCaps", "check_planner", "planner_caps", "planner_for", "NonePlanner", "StreamingPlanner", "BudgetPlanner", "ScoredPlanner"]
