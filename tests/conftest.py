from __future__ import annotations

from pathlib import Path

import pytest

from effctx_core.models import prepare_default_model


@pytest.fixture(scope="session")
def default_model() -> Path:
    """The embedded Gemma 3 270M, assembled once (make test prepares it beforehand)."""
    return prepare_default_model()
