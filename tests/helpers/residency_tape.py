"""A fixed residency tape for the residency screen's and the themes' tests.

The tape (block size 16, a block never spans two segments):

    blocks  0–3   system     tokens    0–63     block 0 is the sink
    blocks  4–60  document   tokens   64–963    block 60 is 960–963 (4 tokens)
    blocks 61–63  user       tokens  964–1003   block 63 is 996–1003 (8 tokens)
    blocks 64–71  assistant  tokens 1004–1123   all recent; block 71 is 8 tokens

    evicted: blocks 10–19 (160–319, lowest score), 30–34 (480–559, least recently used)
    cold:    blocks 40–44 (640–719, parked)
    pinned:  block 50; everything else is hot because it fits the budget

At 100×30 the view is 59 cells wide.
"""

from __future__ import annotations

from effctx_core.residency.blocks import BlockClass, BlockFlag, BlockTable, Reason, Segment

SIZE = (100, 30)
ROW = 59  # cells per row of the view at SIZE


def segments() -> list[tuple[Segment, int]]:
    return [(Segment.SYSTEM, 64), (Segment.DOCUMENT, 900), (Segment.USER, 40), (Segment.ASSISTANT, 120)]


def planned_tape() -> BlockTable:
    table = BlockTable.from_segments(segments(), 16, turn_of_segment=[0, 0, 1, 1])
    table.reason[:] = Reason.FITS_BUDGET
    table.cls[0], table.flags[0], table.reason[0] = BlockClass.SINK, BlockFlag.SINK, Reason.SINK_WINDOW
    table.cls[-8:], table.flags[-8:], table.reason[-8:] = BlockClass.RECENT, BlockFlag.RECENT, Reason.RECENT_WINDOW
    table.cls[10:20], table.reason[10:20], table.score[10:20] = BlockClass.EVICTED, Reason.EVICTED_SCORE, 0.125
    table.cls[30:35], table.reason[30:35] = BlockClass.EVICTED, Reason.EVICTED_LRU
    table.cls[40:45], table.reason[40:45] = BlockClass.COLD, Reason.PARKED
    table.flags[50], table.reason[50] = BlockFlag.PINNED, Reason.PINNED
    table.renumber_positions()
    return table
