from __future__ import annotations

import time
from pathlib import Path

import pytest

from effctx_core.models import prepare_default_model


@pytest.fixture(scope="session")
def default_model() -> Path:
    """The embedded Gemma 3 270M, assembled once (make test prepares it beforehand)."""
    return prepare_default_model()


@pytest.fixture
def utc(monkeypatch):
    """Local time is UTC: screens that show creation times in local time render the same anywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
