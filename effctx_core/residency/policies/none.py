"""`none`: keep everything; a tape over the budget is reported as over budget, not cut."""

from __future__ import annotations

from effctx_core.residency.blocks import BlockClass, BlockTable, Reason
from effctx_core.residency.policies.base import Planner, PlannerCaps


class NonePlanner(Planner):
    name = "none"
    evicts = False

    def plan(self, table: BlockTable, budget: int, caps: PlannerCaps) -> BlockTable:
        out = table.planned_copy()
        keep = out.cls < BlockClass.COLD
        out.cls[keep] = BlockClass.HOT
        out.reason[keep] = Reason.FITS_BUDGET
        return out
