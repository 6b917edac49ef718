"""`scored`: keep the heavy hitters, the blocks with the highest attention scores (H2O).

Only where the backend supplies scores; otherwise the policy is refused, never faked.
"""

from __future__ import annotations

import numpy as np

from ...contract import UnsupportedFeatureError
from ..blocks import BlockClass, BlockTable, Reason
from .base import PlannerCaps, WindowedPlanner, ascending_order, float_key, mark_windows, protected_tokens


class ScoredPlanner(WindowedPlanner):
    name = "scored"

    def plan(self, table: BlockTable, budget: int, caps: PlannerCaps) -> BlockTable:
        if not caps.attention_scores:
            raise UnsupportedFeatureError(
                "the scored policy needs attention scores, and this backend does not supply them"
            )
        out, open_ = mark_windows(table, self.sink_tokens, self.recent_tokens)
        idx = np.flatnonzero(open_)
        room = max(budget - protected_tokens(out, open_), 0)
        # Highest score first: invert the ascending key; NaN (no score) sorts last.
        key = float_key(out.score[idx])
        key = np.where(np.isnan(out.score[idx]), (1 << 32) - 1, ((1 << 32) - 1) - key)
        order = ascending_order(idx, (key, 32))
        kept = np.cumsum(out.sizes[idx][order]) <= room
        keep, drop = idx[order[kept]], idx[order[~kept]]
        out.cls[keep] = BlockClass.HOT
        out.reason[keep] = Reason.FITS_BUDGET
        out.cls[drop] = BlockClass.EVICTED
        out.reason[drop] = Reason.EVICTED_SCORE
        return out
