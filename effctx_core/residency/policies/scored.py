"""`scored`: keep the heavy hitters, the blocks with the highest attention scores (H2O).

Only where the backend supplies scores (its `needs`): `planner_for` refuses the policy otherwise.
"""

from __future__ import annotations

import numpy as np

from effctx_core.residency.blocks import BlockClass, BlockTable, Reason
from effctx_core.residency.policies.base import (
    PlannerCaps,
    WindowedPlanner,
    float_key,
    mark_windows,
    protected_tokens,
    sort_keys,
    split_lowest,
)


class ScoredPlanner(WindowedPlanner):
    name = "scored"
    keeps_budget = True
    needs = {"attention_scores": "attention scores"}

    def plan(self, table: BlockTable, budget: int, caps: PlannerCaps) -> BlockTable:
        out, open_ = mark_windows(table, self.sink_tokens, self.recent_tokens)
        idx = np.flatnonzero(open_)
        room = max(budget - protected_tokens(out, open_), 0)
        scores = out.score[idx]
        # Lowest score goes first, and a block without a score before any scored one.
        keys = sort_keys(idx, (np.where(np.isnan(scores), 0, float_key(scores) + 1), 33))
        sizes = out.sizes[idx]
        victims, kept = split_lowest(keys, sizes, int(sizes.sum()) - room, room)
        keep, drop = idx[kept], idx[victims]
        out.cls[keep] = BlockClass.HOT
        out.reason[keep] = Reason.FITS_BUDGET
        out.cls[drop] = BlockClass.EVICTED
        out.reason[drop] = Reason.EVICTED_SCORE
        return out
