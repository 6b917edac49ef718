"""An open SessionEngine for a test, closed whatever the test does."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from effctx_core.engine import SessionEngine
from effctx_core.profiles import Profile


@contextmanager
def opened_engine(model: Path, profile: Profile, **options: Any) -> Iterator[SessionEngine]:
    engine = SessionEngine(model, profile, **options)
    engine.open()
    try:
        yield engine
    finally:
        engine.close()
