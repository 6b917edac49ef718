"""Backends by name. Imported lazily so a command loads only the runtime it uses."""

from __future__ import annotations

from ..contract import Backend, EffctxError

BACKENDS = ("llama",)


def get_backend(name: str) -> Backend:
    if name == "llama":
        from .llama import LlamaBackend

        return LlamaBackend()
    raise EffctxError(f"unknown backend {name!r} (available: {', '.join(BACKENDS)})")
