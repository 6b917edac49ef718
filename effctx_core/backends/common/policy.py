"""Which residency policies a backend's executor can carry out, and the executor of a
backend that cannot edit its cache."""

from __future__ import annotations

import numpy as np

from effctx_core.contract import Capabilities, RangeAction
from effctx_core.errors import UnsupportedFeatureError
from effctx_core.residency import BlockTable
from effctx_core.residency.policies import policy_class


def check_policy(caps: Capabilities, policy: str) -> None:
    """An evicting policy needs the cache to shift: an executor removes a middle range and
    moves the later positions down, where the session's capabilities say it can."""
    if policy_class(policy).evicts and not caps.position_shift.supported:
        raise UnsupportedFeatureError(
            f"the {policy} policy removes middle ranges and shifts later positions, "
            f"which this context cannot do: {caps.position_shift.reason}"
        )


class NoEditExecutor:
    """The executor of a backend whose cache cannot drop a middle range (OpenVINO's, a
    llama-server slot): check_policy admits only the policy that demotes nothing there,
    so a plan never has anything to carry out."""

    def __init__(self, backend: str, cache: str = "cache"):
        self._cannot = f"the {backend} backend cannot take ranges out of its {cache}"

    def apply(self, current: BlockTable, planned: BlockTable, demoted: np.ndarray) -> list[RangeAction]:
        if len(demoted):
            raise UnsupportedFeatureError(self._cannot)
        return []
