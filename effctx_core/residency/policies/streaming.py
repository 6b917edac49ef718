"""`streaming` (StreamingLLM): attention-sink tokens plus a recent window; the rest goes."""

from __future__ import annotations

from effctx_core.residency.blocks import BlockClass, BlockTable, Reason
from effctx_core.residency.policies.base import PlannerCaps, WindowedPlanner, mark_windows


class StreamingPlanner(WindowedPlanner):
    name = "streaming"

    def plan(self, table: BlockTable, budget: int, caps: PlannerCaps) -> BlockTable:
        out, open_ = mark_windows(table, self.sink_tokens, self.recent_tokens)
        # The window is the policy: a middle block goes even when the budget has room,
        # exactly as StreamingLLM drops what leaves the window.
        out.cls[open_] = BlockClass.EVICTED
        out.reason[open_] = Reason.EVICTED_OUTSIDE_WINDOWS
        return out
