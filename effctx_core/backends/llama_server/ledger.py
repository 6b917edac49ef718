"""The server's own account of what it reused, request by request, beside what effctx's
model of the slot expected: where the two differ, the server's figure is what a session
reports, and the ledger keeps the difference."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

_KEPT = 16  # the latest differences kept for the report


@dataclass
class CacheLedger:
    requests: int = 0
    cached: int = 0  # sum of timings.cache_n: prompt tokens the server reused
    computed: int = 0  # sum of timings.prompt_n: prompt tokens it evaluated
    expected_cached: int = 0  # what effctx's model of the slot said it would reuse
    mismatches: int = 0  # requests where the two differ
    differences: deque[str] = field(default_factory=lambda: deque(maxlen=_KEPT))

    def record(self, what: str, prompt: int, expected: int, cache_n: int, prompt_n: int) -> None:
        self.requests += 1
        self.cached += cache_n
        self.computed += prompt_n
        self.expected_cached += expected
        if cache_n != expected:
            self.mismatches += 1
            self.differences.append(f"{what}: the server reused {cache_n} of {prompt} prompt tokens, "
                                    f"effctx expected {expected}")

    @property
    def agrees(self) -> bool:
        return self.mismatches == 0

    def summary(self) -> str:
        line = (f"{self.requests} requests: the server reused {self.cached} prompt tokens and evaluated "
                f"{self.computed}; effctx expected {self.expected_cached} reused")
        return line if self.agrees else f"{line}; {self.mismatches} requests differed"
