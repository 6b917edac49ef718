"""`effctx bench verdict`: keep a cell only for a step function over the baseline cell.

Keep needs, at passing quality (a certificate that counts here), one of: at least 2x
lower TTFT on the same workloads, at least 2x lower cold TTFT at a length of 16k tokens
or more with the same task score there, at least 1.5x more certified context, or at
least 1.3x the decode rate. Anything less is noise to maintain: drop.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from effctx_core.certify.matrix import Matrix, MatrixRow
from effctx_core.certify.selection import SelectionError, mean_ttft
from effctx_core.profiles import DEFAULT_PROFILE_NAME
from effctx_core.units import format_count, format_counted, format_ms, format_rate

TTFT_STEP = 2.0
CONTEXT_STEP = 1.5
LONG_TOKENS = 16_384  # where "at length" starts
# The task score a cell may lose against the baseline at that length and still keep "the
# same quality": one trial in twenty.
SCORE_SLACK = 0.05
DECODE_STEP = 1.3


@dataclass(frozen=True)
class Verdict:
    profile: str
    backend: str
    verdict: str  # keep, drop, baseline, or "no verdict"
    evidence: tuple[str, ...]

    def to_dict(self) -> dict:
        return asdict(self)


def _ttft(row: MatrixRow, baseline: MatrixRow) -> tuple[float | None, str]:
    """Baseline mean TTFT over the cell's, over the workloads both measured with the same file."""
    assert row.certificate is not None and baseline.certificate is not None
    mine, theirs = row.certificate["workloads"], baseline.certificate["workloads"]
    means = {n: (cell, base) for n in sorted(mine) if n in theirs and mine[n]["digest"] == theirs[n]["digest"]
             if (cell := mean_ttft(mine[n])) is not None and (base := mean_ttft(theirs[n])) is not None}
    if not means:
        return None, "TTFT: no workload with a measured TTFT on both cells"
    shared = list(means)
    cell_ms = sum(cell for cell, _ in means.values()) / len(means)
    base_ms = sum(base for _, base in means.values()) / len(means)
    ratio = base_ms / cell_ms if cell_ms else None
    shown = f"{ratio:.2f}x" if ratio is not None else "-"
    return ratio, (f"TTFT {format_ms(cell_ms)} against {format_ms(base_ms)} on {', '.join(shared)}: {shown} lower "
                   f"(keep at >= {TTFT_STEP}x)")


def _at_length(row: MatrixRow, baseline: MatrixRow) -> tuple[float | None, str]:
    """Baseline cold TTFT over the cell's at the longest length >= LONG_TOKENS both measured,
    where the cell's task score is the baseline's (within SCORE_SLACK) or better."""
    mine, theirs = row.effective, baseline.effective
    if mine is None or theirs is None:
        return None, "TTFT at length: a certificate without task families (certify with the full plan)"
    base_rows = {r["length"]: r for r in theirs["by_length"]}
    shared = [(r, base_rows[r["length"]]) for r in mine["by_length"]
              if r["length"] >= LONG_TOKENS and r["length"] in base_rows
              and r["cold_ttft_ms"] and base_rows[r["length"]]["cold_ttft_ms"]]
    if not shared:
        return None, f"TTFT at length: no length of {format_count(LONG_TOKENS)} tokens or more measured on both cells"
    cell, base = shared[-1]
    if cell["score"] < base["score"] - SCORE_SLACK:
        return None, (f"TTFT at {format_count(cell['length'])} tokens: task score {cell['score']:.2f} against "
                      f"{base['score']:.2f}, not the same quality")
    ratio = base["cold_ttft_ms"] / cell["cold_ttft_ms"]
    return ratio, (f"cold TTFT at {format_count(cell['length'])} tokens {format_ms(cell['cold_ttft_ms'])} against "
                   f"{format_ms(base['cold_ttft_ms'])}: {ratio:.2f}x lower, task score {cell['score']:.2f} against "
                   f"{base['score']:.2f} (keep at >= {TTFT_STEP}x)")


def _verdict(row: MatrixRow, baseline: MatrixRow) -> Verdict:
    assert row.certificate is not None and baseline.certificate is not None
    ttft, ttft_line = _ttft(row, baseline)
    long_ttft, long_line = _at_length(row, baseline)
    mine, theirs = row.certified_tokens or 0, baseline.certified_tokens or 0
    context = mine / theirs if theirs else None
    context_line = (f"certified context {format_count(mine)} against {format_counted(theirs, 'token')}: {context:.2f}x (keep at >= {CONTEXT_STEP}x)"
                    if context is not None else "certified context: the baseline has none")
    rate = row.certificate["throughput"]["engine"]["decode_tps"]
    base_rate = baseline.certificate["throughput"]["engine"]["decode_tps"]
    decode = rate / base_rate if base_rate else None
    if decode is None:
        decode_line = "decode: the baseline has no rate"
    elif not rate:
        decode_line = "decode: this cell has no rate"
    else:
        decode_line = (f"decode {format_rate(rate)} against {format_rate(base_rate)}: {decode:.2f}x "
                       f"(keep at >= {DECODE_STEP}x)")
    steps = [name for name, value, step in (("TTFT", ttft, TTFT_STEP), ("TTFT at length", long_ttft, TTFT_STEP),
                                            ("certified context", context, CONTEXT_STEP),
                                            ("decode", decode, DECODE_STEP)) if value is not None and value >= step]
    quality = f"quality: {row.certificate['reason']}"
    verdict = "keep" if steps else "drop"
    summary = (f"keep: a step function in {', '.join(steps)}" if steps
               else "drop: no step function over the baseline")
    return Verdict(row.cell.profile, row.cell.backend, verdict,
                   (summary, ttft_line, long_line, context_line, decode_line, quality))


def verdicts(matrix: Matrix, baseline: str = DEFAULT_PROFILE_NAME) -> list[Verdict]:
    base = matrix.row(baseline)
    if base is None or base.certificate is None or base.status != "certified":
        raise SelectionError(f"bench verdict: the baseline cell {baseline!r} is not certified on this machine; "
                             f"run `effctx certify --profile {baseline}`")
    out = [Verdict(baseline, base.cell.backend, "baseline",
                   (f"the baseline: certified up to {format_counted(base.certified_tokens or 0, 'token')}",))]
    for row in matrix.rows:
        if row is base:
            continue
        if row.status == "certified":
            out.append(_verdict(row, base))
        else:
            out.append(Verdict(row.cell.profile, row.cell.backend, "no verdict", (f"{row.status}: {row.note}",)))
    return out
