"""The machine a certificate was measured on: what it records, and the id that says
whether a stored certificate was made here.

Only facts read from the OS are recorded. `accelerator` is None: effctx certifies CPU
cells, and nothing here detects a GPU or NPU, so a value would be a guess.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class Hardware:
    machine_id: str  # sha256[:16] of "cpu_model|cores|memory GiB|platform.machine()"
    cpu_model: str
    cores: int
    memory_bytes: int
    accelerator: str | None = None

    def to_dict(self) -> dict:
        """The certificate's `hardware` object."""
        return asdict(self)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def cpu_model(cpuinfo: str | None = None) -> str:
    """The first "model name" of /proc/cpuinfo; else platform.processor(); else the
    architecture (ARM kernels have no "model name" line, and processor() is often "")."""
    text = _read_text(CPUINFO) if cpuinfo is None else cpuinfo
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "model name" and value.strip():
            return " ".join(value.split())
    return platform.processor().strip() or platform.machine() or "unknown CPU"


def memory_bytes(meminfo: str | None = None) -> int:
    """MemTotal of /proc/meminfo (kB there, 1024 bytes each); else the physical pages
    times the page size; else 0, which the schema refuses, so that no certificate states
    a memory size nobody read. Inside a container both are the host's memory, not a limit."""
    text = _read_text(MEMINFO) if meminfo is None else meminfo
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "MemTotal:" and fields[1].isdigit():
            return int(fields[1]) * 1024
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def machine_id(cpu: str, cores: int, memory: int, arch: str) -> str:
    # Memory in whole GiB: MemTotal moves by a few MB across kernel updates, and the same
    # machine must keep its id.
    gib = round(memory / 2**30)
    return hashlib.sha256(f"{cpu}|{cores}|{gib}|{arch}".encode()).hexdigest()[:16]


@functools.cache
def this_machine() -> Hardware:
    cpu = cpu_model()
    # os.cpu_count() is None only where the OS does not say; one core is the least a
    # machine that runs this has, and the schema requires a positive count.
    cores = os.cpu_count() or 1
    memory = memory_bytes()
    return Hardware(machine_id(cpu, cores, memory, platform.machine()), cpu, cores, memory, None)
