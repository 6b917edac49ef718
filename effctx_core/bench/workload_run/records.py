"""The records of a workload run: each turn beside its control, and the report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

from effctx_core.contract import BaselineRun

# Two runs of the same turn differ by a few percent (measured on 2 CPU cores): a turn
# counts as slower than the control only beyond this.
SLOWER_TOLERANCE = 0.05


@dataclass(frozen=True)
class ControlTurn:
    ttft_ms: float
    wall_ms: float
    generated: int
    # Decoded the same ids as effctx over their common length: the two stop at a stop
    # text differently (the library also counts the stop text's tokens it generated).
    same_reply: bool

    @classmethod
    def of(cls, run: BaselineRun, reply: Sequence[int]) -> ControlTurn:
        n = min(len(run.tokens), len(reply))
        return cls(run.prefill_ms, run.prefill_ms + run.decode_ms, run.decode_tokens,
                   tuple(run.tokens[:n]) == tuple(reply[:n]))


@dataclass(frozen=True)
class TurnRun:
    label: str
    kind: str  # cold, suffix, edit, branch, second-process
    prompt_tokens: int
    reused: int
    computed: int
    dropped: int
    ttft_ms: float | None  # None when no token arrived
    prefill_tps: float
    decode_tps: float
    generated: int
    wall_ms: float
    reply: str
    correct: bool | None  # for a question with expected answers: the reply holds one
    how: str  # what effctx did for the part it did not compute
    control: ControlTurn | None = None

    @property
    def ratio(self) -> float | None:
        """Control wall time over effctx's: above 1, effctx was faster."""
        if self.control is None or self.wall_ms <= 0:
            return None
        return self.control.wall_ms / self.wall_ms

    @property
    def ttft_ratio(self) -> float | None:
        if self.control is None or not self.ttft_ms:
            return None
        return self.control.ttft_ms / self.ttft_ms

    @property
    def slower(self) -> bool:
        return self.ratio is not None and self.ratio < 1 - SLOWER_TOLERANCE

    def to_dict(self) -> dict:
        out = asdict(self)
        out.update(ratio=self.ratio, ttft_ratio=self.ttft_ratio, slower=self.slower)
        return out


def _mean(values: Sequence[float | None]) -> float | None:
    """The mean of the measured values; None when none was."""
    measured = [v for v in values if v is not None]
    return sum(measured) / len(measured) if measured else None


@dataclass(frozen=True)
class WorkloadReport:
    workload: str
    digest: str
    profile: str
    backend: str
    control_name: str | None
    turns: tuple[TurnRun, ...]
    accounting: tuple[str, ...] = field(default_factory=tuple)  # one line per turn whose counts did not add up

    @property
    def accounting_agrees(self) -> bool:
        return not self.accounting

    def of_kind(self, kind: str) -> list[TurnRun]:
        return [t for t in self.turns if t.kind == kind]

    def totals(self) -> dict[str, dict[str, float | None]]:
        """The mean time to first token of each kind of turn (cold, warm in a second
        process, changed suffix, edited prefix, branch) and the mean wall time per turn,
        in ms, effctx and control side by side."""

        def pair(turns: Sequence[TurnRun], wall: bool = False) -> dict[str, float | None]:
            # A turn without a token has no TTFT: its control's does not count either.
            turns = [t for t in turns if wall or t.ttft_ms is not None]
            mine = _mean([t.wall_ms if wall else t.ttft_ms for t in turns])
            theirs = _mean([(t.control.wall_ms if wall else t.control.ttft_ms) for t in turns if t.control])
            return {"effctx": mine, "control": theirs if len([t for t in turns if t.control]) == len(turns) else None}

        return {
            "cold full prefill": pair(self.of_kind("cold")),
            "warm same prefix (second process)": pair(self.of_kind("second-process")),
            "warm changed suffix": pair(self.of_kind("suffix")),
            "edited stable segment": pair(self.of_kind("edit")),
            "branch": pair(self.of_kind("branch")),
            "wall per turn": pair(list(self.turns), wall=True),
        }

    def curve(self) -> list[tuple[int, float, float | None]]:
        """(tokens effctx computed, effctx TTFT, control TTFT) per turn with a TTFT, by size."""
        return sorted((t.computed, t.ttft_ms, t.control.ttft_ms if t.control else None) for t in self.turns
                      if t.ttft_ms is not None)

    @property
    def decode_tps(self) -> float | None:
        return _mean([t.decode_tps for t in self.turns if t.generated > 1])

    @property
    def questions(self) -> list[TurnRun]:
        return [t for t in self.turns if t.correct is not None]

    def to_dict(self) -> dict:
        return {
            "workload": self.workload, "digest": self.digest, "profile": self.profile, "backend": self.backend,
            "control": self.control_name, "turns": [t.to_dict() for t in self.turns],
            "totals": self.totals(), "curve": [list(p) for p in self.curve()],
            "accounting": {"agree": self.accounting_agrees, "problems": list(self.accounting)},
            "slower_turns": [t.label for t in self.turns if t.slower],
            "questions": {"asked": len(self.questions), "correct": sum(bool(t.correct) for t in self.questions)},
        }
