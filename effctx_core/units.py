"""Units: byte sizes for people, printed (`format_bytes`) and read back (`parse_memory`);
counts, shares, durations and rates as a person reads them (`format_count`, `format_counted`,
`format_share`, `format_ms`, `format_rate`, a turn's `turn_speeds`); elapsed milliseconds between `time.perf_counter_ns()` readings
(`ms_since`, `ms_between`)."""

from __future__ import annotations

import math
import re
import time

from effctx_core.errors import EffctxError


def format_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}".rstrip("0").rstrip(".") + f" {unit}"
    return f"{n} B"


def format_count(n: float) -> str:
    """A count of tokens or positions: a whole number with thousands separators."""
    return f"{round(n):,}"


def format_counted(n: float, noun: str) -> str:
    """A count and its noun, singular for one (1 token, 0 tokens, 2,048 tokens); the noun
    is one whose plural takes an s."""
    return f"{format_count(n)} {noun}{'' if round(n) == 1 else 's'}"


def format_share(fraction: float) -> str:
    """A part of a whole in whole percent (87%); 100% and 0% only for all and nothing, so
    a prompt that recomputed 3 tokens of 1,000 does not read as fully reused."""
    percent = round(fraction * 100)
    if 0 < fraction < 1:
        percent = min(99, max(1, percent))
    return f"{percent}%"


def _three_digits(x: float) -> str:
    """x with about three significant digits: 7.14, 26.8, 1,234."""
    for digits, below in ((2, 9.995), (1, 99.95)):
        if x < below:
            return f"{x:.{digits}f}"
    return f"{x:,.0f}"


def format_ms(ms: float) -> str:
    """A duration: milliseconds below a second, seconds from there on (2.5 ms, 850 ms,
    7.14 s, 26.8 s, 1,234 s)."""
    if ms < 9.95:
        return f"{ms:.1f} ms"
    if ms < 999.5:
        return f"{ms:.0f} ms"
    return f"{_three_digits(ms / 1000)} s"


def format_rate(tokens_per_s: float) -> str | None:
    """A measured speed in tokens per second (0.52, 12.3, 1,234 tok/s); None for 0, what
    the engine reports when nothing was timed (no tokens, or no time), and for a rate that
    is not finite."""
    if not 0 < tokens_per_s < math.inf:
        return None
    return f"{tokens_per_s:.2g} tok/s" if tokens_per_s < 1 else f"{_three_digits(tokens_per_s)} tok/s"


def turn_speeds(generated: int, ttft_ms: float | None, prefill_tps: float,
                decode_tps: float) -> list[tuple[str, str]]:
    """A turn's TTFT and rates as (name, figure), only those measured: no TTFT where no
    token arrived (a turn cancelled in its prefill), no decode rate for a turn that
    generated nothing, no rate where no time was taken."""
    figures = (("TTFT", None if ttft_ms is None else format_ms(ttft_ms)), ("prefill", format_rate(prefill_tps)),
               ("decode", format_rate(decode_tps) if generated else None))
    return [(name, figure) for name, figure in figures if figure is not None]


def ttft_after(lead_ms: float, ttft_ms: float | None) -> float | None:
    """A turn's TTFT with what the user waited for before the turn (a prefix loaded or
    restored for it); a turn without a token still has none."""
    return None if ttft_ms is None else lead_ms + ttft_ms


_UNITS = {
    "b": 1,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
    "kb": 10**3, "mb": 10**6, "gb": 10**9,
}
_MEMORY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*")


def parse_memory(text: str) -> int:
    """'2GiB' -> 2147483648. Units: B, KiB, MiB, GiB (1024) and KB, MB, GB (1000)."""
    units = "B, KiB, MiB, GiB, KB, MB, GB"
    m = _MEMORY.fullmatch(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise EffctxError(f"cannot read memory size {text!r}: expected a number and a unit ({units}), e.g. 2GiB")
    number, unit = m.group(1), _UNITS[m.group(2).lower()]
    whole, _, frac = number.partition(".")
    # Exact arithmetic: 1.1GB is 1,100,000,000 bytes, not a float's neighbour of it.
    scaled = int(whole + frac) * unit
    bytes_, rest = divmod(scaled, 10 ** len(frac))
    if rest:
        raise EffctxError(f"memory size {text!r} is not a whole number of bytes")
    if bytes_ <= 0:
        raise EffctxError(f"memory size {text!r} must be more than 0 bytes")
    return bytes_


def ms_between(t0_ns: int, t1_ns: int) -> float:
    """Milliseconds from one `time.perf_counter_ns()` reading to a later one."""
    return (t1_ns - t0_ns) / 1e6


def ms_since(t0_ns: int) -> float:
    """Milliseconds from a `time.perf_counter_ns()` reading to now."""
    return ms_between(t0_ns, time.perf_counter_ns())
