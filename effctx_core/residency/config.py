"""A profile's residency section: the policy and its windows, checked."""

from __future__ import annotations

from dataclasses import dataclass

from effctx_core.errors import EffctxError
from effctx_core.residency.policies import POLICIES, policy_class


@dataclass(frozen=True)
class ResidencyConfig:
    policy: str = "none"
    # Whole blocks of the default block_size, so `policy = "streaming"` alone is valid.
    sink_tokens: int = 32
    recent_tokens: int = 992
    budget: int = 0  # tokens; 0 = the context size
    block_size: int = 32
    # How many tokens one decode slide makes room for: each slide makes llama.cpp
    # re-rotate every shifted key, so sliding a token at a time would cost that per token.
    slide_tokens: int = 64

    @property
    def identity_key(self) -> str:
        """The policy and the parameters that decide which tokens its cache keeps."""
        return f"{self.policy}:{self.sink_tokens}:{self.recent_tokens}:{self.budget}:{self.block_size}"

    @property
    def evicts(self) -> bool:
        """Whether the policy takes tokens out of the cache (every policy but none)."""
        cls = POLICIES.get(self.policy)
        return cls is None or cls.evicts  # a name no policy has is refused by validate

    def validate(self, where: str) -> None:
        if self.policy not in POLICIES:
            raise EffctxError(f"{where}: unknown residency policy {self.policy!r} (known: {', '.join(POLICIES)})")
        for name in ("sink_tokens", "recent_tokens", "budget"):
            if getattr(self, name) < 0:
                raise EffctxError(f"{where}: residency.{name} must be 0 or more")
        if self.block_size < 1:
            raise EffctxError(f"{where}: residency.block_size must be at least 1")
        if self.slide_tokens < 1:
            raise EffctxError(f"{where}: residency.slide_tokens must be at least 1")
        policy_class(self.policy).check_config(self, where)
