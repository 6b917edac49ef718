"""The running cell: backend, profile, session, residency tracker and executor, opened
and closed as one. A swap replaces it whole, and a failed swap puts the old one back."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from effctx_core.backends.registry import CellBackend, get_backend
from effctx_core.cells import check_cell, residency_source
from effctx_core.contract import ResidencyExecutor, Session
from effctx_core.errors import EffctxError
from effctx_core.events.trace import CellResidency
from effctx_core.profiles import Profile
from effctx_core.residency.blocks import BlockTable
from effctx_core.residency.policies import planner_caps
from effctx_core.residency.tracker import ResidencyTracker


@dataclass(frozen=True)
class RunningCell:
    backend: CellBackend
    profile: Profile
    session: Session
    tracker: ResidencyTracker
    executor: ResidencyExecutor[BlockTable]

    @classmethod
    def open(cls, model_path: Path, profile: Profile) -> "RunningCell":
        """A session of `profile` with its residency tracker and executor, or an error and
        nothing left open."""
        backend = get_backend(profile.backend)
        session = backend.open(model_path, profile)
        try:
            info = session.info
            check_cell(backend, info, profile.residency)
            eviction = backend.runtime_eviction(profile)
            tracker = ResidencyTracker(profile.residency, profile.budget_tokens, planner_caps(info.capabilities),
                                       eviction, residency_source(info))
            executor = backend.residency_executor(session)
        except EffctxError:
            session.close()
            raise
        return cls(backend, profile, session, tracker, executor)

    def recorded_residency(self) -> dict[str, Any]:
        """The fields of CellResidency that SessionOpened (or CellSwapped) records of this
        cell, so that a replay shows its residency as the live console did (built as the
        typed record, handed over as the keywords of the event)."""
        config = self.profile.residency
        return asdict(CellResidency(
            policy=config.policy, block_size=config.block_size, budget=self.profile.budget_tokens,
            sink_tokens=config.sink_tokens, recent_tokens=config.recent_tokens, slide_tokens=config.slide_tokens,
            residency_source=self.tracker.source, residency_reason=self.session.info.capabilities.residency_map.reason,
        ))

    def close(self) -> None:
        self.session.close()
