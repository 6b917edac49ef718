"""How long the residency view takes to draw a screenful of a long tape (not a test).

    effctx bench residency [--tokens N] [--json]
    python -m effctx_tui.bench_residency [n_tokens]      (JSON only)

A redraw here is `render_line` for every visible row with the row cache cleared, which
is what a live update costs (set_table clears the cache); a cursor move or a scroll
re-renders fewer rows. The compositor's own work on top is the same for any widget.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Callable, Iterator

import numpy as np
from textual.app import App, ComposeResult

from effctx_core.cli.options import OneLineParser
from effctx_core.errors import EffctxError
from effctx_core.residency.blocks import BlockClass, BlockTable, Segment
from effctx_core.units import ms_since
from effctx_tui.bench.command import bench_command
from effctx_tui.widgets.residency_strip import ResidencyStrip
from effctx_tui.widgets.residency_tape import Zoom
from effctx_tui.widgets.residency_view import ResidencyView

BLOCK_SIZE = 16


def long_tape(n_tokens: int) -> BlockTable:
    """A streaming-style plan over a chat-shaped tape: a sink, a recent window, and in
    between scattered evictions and cold stretches, so rows have many class changes."""
    system, user = 512, 256
    segments = [(Segment.SYSTEM, system)]
    left = n_tokens - system
    while left > 0:
        for kind, size in ((Segment.DOCUMENT, 3000), (Segment.USER, user), (Segment.ASSISTANT, 700)):
            take = min(size, left)
            if take:
                segments.append((kind, take))
                left -= take
    table = BlockTable.from_segments(segments, BLOCK_SIZE)
    rng = np.random.default_rng(7)
    table.cls[:] = rng.choice(
        [BlockClass.HOT, BlockClass.COLD, BlockClass.EVICTED], size=len(table), p=[0.5, 0.2, 0.3]
    )
    table.cls[:4] = BlockClass.SINK
    table.cls[-256:] = BlockClass.RECENT
    table.renumber_positions()
    return table


def _stats(samples_ms: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(float(np.median(samples_ms)), 3),
        "p95_ms": round(float(np.percentile(samples_ms, 95)), 3),
        "max_ms": round(max(samples_ms), 3),
    }


def _time(action: Callable[[], object], repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        action()
        samples.append(ms_since(start))
    return samples


class _BenchApp(App):
    def __init__(self, table: BlockTable) -> None:
        super().__init__()
        self.table = table

    def compose(self) -> ComposeResult:
        yield ResidencyStrip(self.table)
        yield ResidencyView(self.table)


async def _run(n_tokens: int, width: int, height: int, repeats: int) -> dict:
    table = long_tape(n_tokens)
    app = _BenchApp(table)
    result: dict = {"n_tokens": table.n_tokens, "n_blocks": len(table), "width": width, "height": height}
    async with app.run_test(size=(width, height)) as pilot:
        view = app.query_one(ResidencyView)
        strip = app.query_one(ResidencyStrip)
        rows = view.scrollable_content_region.height

        def redraw() -> None:
            view.clear_caches()
            for y in range(rows):
                view.render_line(y)

        for zoom in Zoom:
            view.zoom = zoom
            view.move_cursor_to_token(table.n_tokens // 2)  # mid-tape: scrolled, not row 0
            await pilot.pause()
            redraw()  # warm up numpy and the style lookups once
            result[f"redraw_{zoom.value}"] = {
                "rows": rows,
                "cells_per_row": view.cells_per_row,
                "tape_rows": view.row_count,
                **_stats(_time(redraw, repeats)),
            }

        # a live update: a fresh table (same size) replaces the old one; the first
        # redraw after it is measured above, so this is the bookkeeping alone
        tables = [table.copy() for _ in range(repeats)]
        result["set_table"] = _stats(_time(lambda: view.set_table(tables.pop()), repeats))

        def strip_update() -> None:
            strip.set_table(table)
            strip.render_line(0)

        result["strip_set_table_and_render"] = _stats(_time(strip_update, repeats))
    return result


def run_render_benchmark(n_tokens: int = 131072, width: int = 120, height: int = 40, repeats: int = 50) -> dict:
    """Redraw times of the visible rows at both zooms, set_table and the strip, in ms."""
    return asyncio.run(_run(n_tokens, width, height, repeats))


def _run_checked(opts) -> dict:
    if opts.tokens < 1:
        raise EffctxError("--tokens must be positive")
    return run_render_benchmark(opts.tokens)


def _table(result: dict) -> Iterator[str]:
    for name, stats in result.items():
        if isinstance(stats, dict):
            yield f"{name:28} median {stats['median_ms']:7.3f} ms   p95 {stats['p95_ms']:7.3f} ms"
        else:
            yield f"{name:28} {stats}"


def main(argv: list[str]) -> int:
    """`effctx bench residency`: here, not in effctx_core's CLI, because it draws with Textual."""
    parser = OneLineParser(prog="effctx bench residency", description="time a redraw of the residency view")
    parser.add_argument("--tokens", type=int, default=131072, metavar="N")
    return bench_command(parser, argv, _run_checked, _table)


if __name__ == "__main__":
    tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 131072
    print(json.dumps(run_render_benchmark(tokens), indent=2))
