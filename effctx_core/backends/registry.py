"""Backends by name. Imported lazily so a command loads only the runtime it uses."""

from __future__ import annotations

from effctx_core.contract import Backend
from effctx_core.errors import EffctxError

BACKENDS = ("llama",)


def get_backend(name: str) -> Backend:
    if name == "llama":
        from effctx_core.backends.llama.session import LlamaBackend

        return LlamaBackend()
    raise EffctxError(f"unknown backend {name!r} (available: {', '.join(BACKENDS)})")
