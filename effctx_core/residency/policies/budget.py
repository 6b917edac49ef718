"""`budget`: fit the tape to a token budget, keeping a hot set.

Sink, recent and pinned blocks are kept first. The others are parked cold, in this order,
until the rest fits: segment kind (tool output and chatter before the user's words, the
document and the system prompt last), then the lowest attention score where the backend
supplies scores, else the least recently used, then the oldest. Cold blocks keep their tokens in the tape, so an
executor can bring them back by recompute.
"""

from __future__ import annotations

import numpy as np

from effctx_core.residency.blocks import BlockClass, BlockTable, Reason, Segment
from effctx_core.residency.policies.base import (
    PlannerCaps,
    WindowedPlanner,
    float_key,
    mark_windows,
    protected_tokens,
    sort_keys,
    split_lowest,
)

# Lower ranks are parked first.
EVICTION_RANK = np.zeros(len(Segment), dtype=np.int64)
for rank, seg in enumerate((Segment.OTHER, Segment.TOOL, Segment.ASSISTANT, Segment.USER, Segment.DOCUMENT, Segment.SYSTEM)):
    EVICTION_RANK[seg] = rank


class BudgetPlanner(WindowedPlanner):
    name = "budget"
    keeps_budget = True

    def plan(self, table: BlockTable, budget: int, caps: PlannerCaps) -> BlockTable:
        out, open_ = mark_windows(table, self.sink_tokens, self.recent_tokens)
        idx = np.flatnonzero(open_)
        room = budget - protected_tokens(out, open_)
        sizes = out.sizes[idx]
        over = int(sizes.sum()) - max(room, 0)
        out.cls[idx] = BlockClass.HOT
        out.reason[idx] = Reason.FITS_BUDGET
        if over <= 0:
            return out
        seg_rank = EVICTION_RANK[out.segment[idx]]
        scored = caps.attention_scores and not np.isnan(out.score[idx]).all()
        if scored:
            keys = sort_keys(idx, (seg_rank, 3), (float_key(out.score[idx]), 32))
        else:
            keys = sort_keys(idx, (seg_rank, 3), (out.last_use[idx], 32))
        victim_mask, keeper_mask = split_lowest(keys, sizes, over, max(room, 0))
        victims, keepers = idx[victim_mask], idx[keeper_mask]
        out.cls[victims] = BlockClass.COLD
        # A victim of a segment kind that no keeper has went for its kind; the others
        # lost on the next key.
        floor = EVICTION_RANK[out.segment[keepers]].min() if len(keepers) else len(Segment)
        tie_reason = Reason.EVICTED_SCORE if scored else Reason.EVICTED_LRU
        out.reason[victims] = np.where(EVICTION_RANK[out.segment[victims]] < floor, Reason.EVICTED_SEGMENT, tie_reason)
        return out
