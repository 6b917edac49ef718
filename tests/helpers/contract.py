"""What the conformance suite's tests share besides its fixtures (tests/contract/conftest.py):
the cell's size, skipping a test of a capability the backend does not claim, and text."""

from __future__ import annotations

import pytest

from effctx_core.contract import Capability, Session

# Short enough to keep the suite fast, long enough for several prefill chunks.
N_CTX = 512
N_BATCH = 64


def require(capability: Capability, name: str) -> None:
    """Skip unless the backend claims the capability, naming it and the backend's reason."""
    if not capability.supported:
        pytest.skip(f"needs {name}: {capability.reason}")


def words(session: Session, n_tokens: int, seed: int = 0) -> list[int]:
    """About n_tokens tokens of ordinary text, without BOS, the same on every backend."""
    vocabulary = ("the quick brown fox jumps over the lazy dog and then it runs far away into the green "
                  "field where the sun is warm and the sky is blue").split()
    out: list[int] = []
    i = seed
    while len(out) < n_tokens:
        out += session.tokenize(" " + vocabulary[i % len(vocabulary)], False)
        i += 7
    return out[:n_tokens]
