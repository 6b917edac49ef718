"""Units: byte sizes for people, printed (`format_bytes`) and read back (`parse_memory`),
and elapsed milliseconds between `time.perf_counter_ns()` readings (`ms_since`, `ms_between`)."""

from __future__ import annotations

import re
import time

from effctx_core.errors import EffctxError


def format_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}".rstrip("0").rstrip(".") + f" {unit}"
    return f"{n} B"


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
