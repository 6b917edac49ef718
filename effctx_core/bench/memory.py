"""This process's resident memory from /proc (Linux): now, and the peak since the last
reset, so a benchmark can say what one run of a model held at most."""

from __future__ import annotations

from pathlib import Path

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_bytes(field: str) -> int | None:
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_bytes() -> int | None:
    """Resident set size now (None where /proc does not say)."""
    return _status_bytes("VmRSS")


def peak_rss_bytes() -> int | None:
    """The highest resident set size since the process started or `reset_peak`."""
    return _status_bytes("VmHWM")


def reset_peak() -> bool:
    """Start the peak over from the current resident size ("5" to clear_refs resets the
    high-water mark); False where the kernel does not allow it, and the peak is then
    the process's whole life."""
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True
