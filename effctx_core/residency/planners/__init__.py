"""Residency planners, one policy a module, and the registry that builds them from a profile."""

from __future__ import annotations

from effctx_core.errors import EffctxError
from effctx_core.profiles import ResidencyConfig
from effctx_core.residency.planners.base import Planner, PlannerCaps
from effctx_core.residency.planners.budget import BudgetPlanner
from effctx_core.residency.planners.none import NonePlanner
from effctx_core.residency.planners.scored import ScoredPlanner
from effctx_core.residency.planners.streaming import StreamingPlanner


def planner_for(config: ResidencyConfig) -> Planner:
    if config.policy == "none":
        return NonePlanner()
    if config.policy == "streaming":
        return StreamingPlanner(config.sink_tokens, config.recent_tokens)
    if config.policy == "budget":
        return BudgetPlanner(config.sink_tokens, config.recent_tokens)
    if config.policy == "scored":
        return ScoredPlanner(config.sink_tokens, config.recent_tokens)
    raise EffctxError(f"unknown residency policy {config.policy!r}")


__all__ = ["Planner", "PlannerCaps", "planner_for", "NonePlanner", "StreamingPlanner", "BudgetPlanner", "ScoredPlanner"]
