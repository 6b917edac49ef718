"""The quality gates' measurements: the passkey grid (the passkey task family, measured by
bench/task_grid.py) with Wilson intervals and a no-needle control, and the NLL of a
reference text against the same backend's f16, no-eviction cell.

No throughput figure is certified without these beside it: a faster cache that forgets
the needle or raises the NLL shows it here.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

from effctx_core.engine import SessionEngine
from effctx_core.errors import UnsupportedFeatureError
from effctx_core.profiles import Profile
from effctx_core.residency.config import ResidencyConfig

# The reference text: a long, fixed piece of natural English every Debian-based system
# ships (base-files), read where it lies rather than copied into the repository.
REFERENCE_TEXT = Path("/usr/share/common-licenses/GPL-3")


def wilson(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95% at z = 1.96) of a success rate: it stays inside
    [0, 1] and is honest at the few trials a quick certification runs."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class LengthResult:
    length: int
    found: int
    trials: int
    ci_low: float
    ci_high: float
    needle_resident: int  # trials whose needle was still resident when the model answered

    @property
    def rate(self) -> float:
        return self.found / self.trials if self.trials else 0.0


@dataclass(frozen=True)
class ControlResult:
    """Filler and the question, no needle: an answer with a 5-digit number made one up."""

    trials: int
    false_keys: int


@dataclass(frozen=True)
class PasskeyGrid:
    """The passkey family's grid (bench/task_grid.py) as the passkey gate reads it."""

    lengths: tuple[LengthResult, ...]
    control: ControlResult

    def to_dict(self) -> dict:
        return {"by_length": [asdict(r) for r in self.lengths],
                "control": {"trials": self.control.trials, "false_keys": self.control.false_keys}}


# --------------------------------------------------------------------------- NLL


@dataclass(frozen=True)
class NLLResult:
    supported: bool
    reason: str
    tokens: int | None = None
    nll: float | None = None
    reference_nll: float | None = None
    reference_profile: str | None = None

    @property
    def delta(self) -> float | None:
        if self.nll is None or self.reference_nll is None:
            return None
        return self.nll - self.reference_nll

    def to_dict(self) -> dict:
        return {**asdict(self), "delta": self.delta}


def reference_profile(profile: Profile) -> Profile:
    """The same cell with f16 K and V and nothing evicted: what the NLL is measured against."""
    return profile.with_changes(name=f"{profile.name} (f16, no eviction)", kv_cache_type_k="f16",
                                kv_cache_type_v="f16", residency=ResidencyConfig())


def reference_text(chars: int) -> str | None:
    """The first `chars` characters of the reference text, or None when this machine
    does not have it."""
    try:
        return REFERENCE_TEXT.read_text(encoding="utf-8")[:chars]
    except OSError:
        return None


def run_nll(engine: SessionEngine, reference: float | None, reference_name: str | None, chars: int) -> NLLResult:
    """The NLL of the first `chars` characters of the reference text on the engine's
    cell; `reference` is the f16, no-eviction figure of the same backend (None: this is
    that cell)."""
    text = reference_text(chars)
    if text is None:
        return NLLResult(False, f"the reference text {REFERENCE_TEXT} is not on this machine")
    scores = engine.info.capabilities.token_scores
    if not scores.supported:
        return NLLResult(False, scores.reason)
    try:
        result = engine.score(text)
    except UnsupportedFeatureError as exc:
        return NLLResult(False, str(exc))
    scored, nll = result.tokens, result.mean_nll
    return NLLResult(True, f"mean next-token NLL of {scored} tokens of {REFERENCE_TEXT}", scored, round(nll, 5),
                     round(reference if reference is not None else nll, 5), reference_name)
