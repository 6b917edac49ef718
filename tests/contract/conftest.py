"""The cell contract's conformance suite: every registered backend, on every model it can
read (the default model and a tiny random-weight llama model), runs the same tests.

A backend joins by being in the registry; nothing here names one. What runs is decided
by the backend's own capability report: a claimed capability is exercised, and a test of
one that is not claimed is skipped with the capability's name and the backend's reason.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from effctx_core.backends.registry import BACKENDS, contract_variants, get_backend, spec
from effctx_core.contract import Backend, Session
from effctx_core.errors import BackendUnavailableError, ModelFileError
from effctx_core.models import prepare_default_model
from effctx_core.profiles import Profile
from tests.helpers.contract import N_BATCH, N_CTX
from tests.helpers.tiny_gguf import write_tiny_llama_gguf

MODELS = ("default", "tiny")


@dataclass(frozen=True)
class CellUnderTest:
    backend: Backend
    model_name: str
    model_path: Path
    variant: str = ""
    options: tuple[tuple[str, object], ...] = ()
    # What the variant's services point the profile at (workers, a server).
    service_changes: tuple[tuple[str, object], ...] = ()

    def profile(self, **changes: object) -> Profile:
        # The variant's options, and what its services point them at (workers, a server).
        options = spec(self.backend.name).options(**{**dict(self.options), **dict(self.service_changes)})
        base = Profile(name="contract", backend=self.backend.name, n_ctx=N_CTX, n_batch=N_BATCH,
                       description="the conformance suite's cell", backend_options=options)
        return base.with_changes(**changes) if changes else base

    def open(self, **changes: object) -> Session:
        return self.backend.open(self.model_path, self.profile(**changes))

    def __str__(self) -> str:
        return "-".join(part for part in (self.backend.name, self.variant, self.model_name) if part)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf")


def _model_path(name: str, request: pytest.FixtureRequest) -> Path:
    if name == "default":
        return prepare_default_model()
    path: Path = request.getfixturevalue("tiny_model")
    return path


CELLS = [(b, v, m) for b in BACKENDS for v in contract_variants(b) for m in MODELS]


# Session-scoped: pytest runs every module's tests of one cell before the next cell's, so
# what a variant needs running (two RPC workers, a llama-server to attach to) starts once
# a cell, not once a module; the sessions on it are still the modules' own.
@pytest.fixture(scope="session", params=CELLS, ids=lambda p: "-".join(part for part in p if part))
def cell(request: pytest.FixtureRequest) -> Iterator[CellUnderTest]:
    """The cell, with whatever its variant needs running (started here, stopped once the
    cell's tests are done)."""
    backend_name, variant_name, model_name = request.param
    backend = get_backend(backend_name)
    variant = contract_variants(backend_name)[variant_name]
    path = _model_path(model_name, request)
    try:
        backend.check_model(path)
    except ModelFileError as exc:
        pytest.skip(f"the {backend_name} backend does not read the {model_name} model: {exc}")
    try:
        bare = CellUnderTest(backend, model_name, path, variant_name, variant.options)
        services = variant.services(path, bare.profile()) if variant.services is not None else nullcontext({})
        with services as changes:
            found = CellUnderTest(backend, model_name, path, variant_name, variant.options, tuple(changes.items()))
            reason = backend.unavailable(found.profile())
            if reason is not None:
                pytest.skip(f"{found} cannot run here: {reason}")
            yield found
    except BackendUnavailableError as exc:
        pytest.skip(f"{backend_name} {variant_name} cannot run here: {exc}")


@pytest.fixture(scope="module")
def session(cell: CellUnderTest) -> Iterator[Session]:
    """One session per module and cell; each test starts from an empty cache."""
    opened = cell.open()
    yield opened
    opened.close()


@pytest.fixture
def fresh(session: Session) -> Session:
    session.ensure_prefix([])
    return session
