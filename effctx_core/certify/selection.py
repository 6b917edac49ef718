"""`--profile auto`: the certified cell that did best on a workload, and why, in one line."""

from __future__ import annotations

from dataclasses import dataclass

from effctx_core.bench.workloads import workload_names
from effctx_core.certify.matrix import Matrix, MatrixRow
from effctx_core.errors import EffctxError
from effctx_core.units import format_counted, format_ms

DEFAULT_WORKLOAD = "agent-loop"


class SelectionError(EffctxError):
    pass


@dataclass(frozen=True)
class Selection:
    profile: str
    reason: str


def workload_figure(row: MatrixRow, workload: str) -> dict | None:
    if row.certificate is None:
        return None
    return row.certificate["workloads"].get(workload)


def mean_ttft(figure: dict) -> float | None:
    """None when no turn of the workload timed a first token: not a TTFT of 0."""
    values = figure["ttft_ms"]
    return sum(values) / len(values) if values else None


def _mean_ttft_text(figure: dict) -> str:
    mean = mean_ttft(figure)
    return "no TTFT measured" if mean is None else f"mean TTFT {format_ms(mean)}"


def select_profile(matrix: Matrix, workload: str | None = None) -> Selection:
    """The certified cell with the least wall time over `workload`'s turns (default: the
    agent loop); a tie goes to the longer certified context."""
    name = workload or DEFAULT_WORKLOAD
    certified = matrix.certified()
    if not certified:
        raise SelectionError("--profile auto: no cell is certified on this machine; run `effctx certify --quick`")
    measured = [(row, fig) for row in certified if (fig := workload_figure(row, name)) is not None]
    if not measured:
        builtin = workload_names()
        if name not in builtin:
            raise SelectionError(f"--profile auto: no certified cell has measured workload {name!r}, and "
                                 f"`effctx certify` measures only the built-in ones ({', '.join(builtin)})")
        raise SelectionError(f"--profile auto: no certified cell has measured workload {name!r}; "
                             f"run `effctx certify` (the full plan runs every workload)")
    row, fig = min(measured, key=lambda rf: (rf[1]["wall_ms"], -(rf[0].certified_tokens or 0)))
    others = len(measured) - 1
    return Selection(row.cell.profile, (
        f"profile auto: {row.cell.profile} ({row.cell.backend}): the least time on {name} among {len(measured)} "
        f"certified cell{'s' if len(measured) > 1 else ''} ({fig['wall_ms'] / 1000:.1f} s over {fig['turns']} turns, "
        f"{_mean_ttft_text(fig)}), certified up to {format_counted(row.certified_tokens or 0, 'token')}"
        + ("" if others else "; the only one measured")))
