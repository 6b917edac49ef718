"""The residency map of a runtime that evicts by itself (openvino-genai's cache eviction),
modeled from its settings: the runtime reports how much it holds, never which blocks.

Model: once the tape is longer than `max_tokens`, the first `start_tokens` are sinks, the
last `recent_tokens` are recent, and of the middle the runtime keeps `max_tokens - start -
recent` tokens it chooses by attention scores. Which ones is not known, so the map shows
the newest of them kept and the oldest evicted, and every view of it says "modeled".
"""

from __future__ import annotations

import numpy as np

from effctx_core.contract import RuntimeEviction
from effctx_core.residency.blocks import BlockClass, BlockTable


def modeled_table(table: BlockTable, eviction: RuntimeEviction) -> BlockTable:
    out = table.copy()
    n = table.n_tokens
    if not len(out):
        return out
    resident = np.isin(out.cls, [int(BlockClass.SINK), int(BlockClass.RECENT), int(BlockClass.HOT)])
    out.cls[resident & (out.end <= eviction.start_tokens)] = BlockClass.SINK
    recent = resident & (out.start >= n - eviction.recent_tokens) & (out.end > eviction.start_tokens)
    out.cls[recent] = BlockClass.RECENT
    over = n - eviction.max_tokens
    if over > 0:
        middle = np.flatnonzero(resident & (out.cls == BlockClass.HOT))
        # the oldest middle blocks whose tokens add up to what does not fit
        gone = middle[np.cumsum(out.sizes[middle]) - out.sizes[middle] < over]
        out.cls[gone] = BlockClass.EVICTED
    return out
