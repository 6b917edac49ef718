"""What a certification measures: the quick plan (a few minutes for the built-in cells on
2 CPU cores), the full one (every workload with its control, every task family at
lengths up to what the cell allocates) and the long one (the full plan on the cell
allocated up to the model's trained context, where memory allows)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from effctx_core.bench.smoke import ANSWER_TOKENS
from effctx_core.bench.task_grid import EFFECTIVE_THRESHOLD
from effctx_core.certify.gates import THROUGHPUT_MIN_RATIO
from effctx_core.profiles import Profile
from effctx_core.residency.config import policy_evicts

# The latency budget of the effective-context figure a user picks a cell by.
TTFT_BUDGET_MS = 10_000.0
# The question and the answer need room after the passkey prompt.
ANSWER_ROOM = ANSWER_TOKENS + 64


@dataclass(frozen=True)
class CertifyPlan:
    quick: bool
    lengths: tuple[int, ...]  # passkey prompt lengths, tokens
    depths: tuple[float, ...]
    seeds: int
    nll_chars: int  # characters of the reference text scored (about 4.5 a token)
    prompt_tokens: int  # the throughput figure's prompt
    decode_tokens: int
    rounds: int
    workloads: tuple[str, ...]
    control: bool  # run each workload beside the library's control too
    # The throughput gate's engine/raw threshold (the certificate records the one used).
    throughput_min_ratio: float = THROUGHPUT_MIN_RATIO
    # The task families beside the passkey (bench/tasks), at these depths and `seeds` seeds.
    families: tuple[str, ...] = ()
    task_depths: tuple[float, ...] = (0.25, 0.75)
    # A length is effective while the families' mean score stays at or above this.
    effective_threshold: float = EFFECTIVE_THRESHOLD
    # The latency-budgeted effective context: the longest effective length within this TTFT.
    ttft_budget_ms: float = TTFT_BUDGET_MS
    long: bool = False  # allocate the model's trained context, where memory allows

    def lengths_for(self, profile: Profile) -> tuple[int, ...]:
        """The lengths this profile is tested at: a cell that keeps everything is tested
        up to what it allocates, that limit included (its certified limit can then be
        all it holds); an evicting cell is asked beyond its budget on purpose."""
        if policy_evicts(profile.residency):
            return self.lengths
        limit = profile.n_ctx - ANSWER_ROOM
        fitting = tuple(n for n in self.lengths if n <= limit)
        if not self.quick and (not fitting or fitting[-1] < limit):
            fitting += (limit,)
        return fitting

    def nll_chars_for(self, profile: Profile) -> int:
        """An evicting cell is scored past its budget (about 4.5 characters a token, so
        twice the budget in characters is safely beyond it): the NLL then shows what the
        eviction costs."""
        if policy_evicts(profile.residency):
            return max(self.nll_chars, profile.budget_tokens * 9)
        return self.nll_chars

    def to_dict(self, profile: Profile) -> dict:
        return {"quick": self.quick, "long": self.long, "lengths": list(self.lengths_for(profile)),
                "depths": list(self.depths), "seeds": self.seeds, "families": ["passkey", *self.families],
                "task_depths": list(self.task_depths), "effective_threshold": self.effective_threshold,
                "ttft_budget_ms": self.ttft_budget_ms}

    @property
    def key(self) -> str:
        """What a resumed certification must share with the one it resumes. The threshold
        and the TTFT budget only read the measured grids when the certificate is written,
        so a certification resumed with another budget keeps what it measured (the key
        holds their defaults, as it did before they could be set)."""
        measured = replace(self, effective_threshold=EFFECTIVE_THRESHOLD, ttft_budget_ms=TTFT_BUDGET_MS)
        return repr(sorted(asdict(measured).items()))


QUICK = CertifyPlan(quick=True, lengths=(1024, 2048), depths=(0.25, 0.75), seeds=1, nll_chars=2400,
                    prompt_tokens=512, decode_tokens=32, rounds=4, workloads=("agent-loop",), control=False)
FULL = CertifyPlan(quick=False, lengths=(1024, 2048, 4096, 8192, 16384), depths=(0.1, 0.3, 0.5, 0.7, 0.9),
                   seeds=2, nll_chars=6000, prompt_tokens=1024, decode_tokens=64, rounds=4,
                   workloads=("agent-loop", "prefix-edit", "long-document", "long-decode", "branching"),
                   control=True, families=("multikey", "multikey-text", "multivalue", "vartrack", "aggregation"))
LONG = replace(FULL, lengths=(*FULL.lengths, 32768), long=True)
