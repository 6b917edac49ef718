"""Runtime identity: everything that decides what a KV state means.

Two states are only ever mixed (restored, reused, cached) when their identities are equal.
It is the prefix-cache key: backend, its version, the model, the backend's own settings
that change what the cache holds for a token list, the residency policy, the prompt
template and the tokenizer policy. Which settings count is the backend's knowledge, so
it supplies them as a mapping; the engine and the store only compare and digest them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Mapping

from effctx_core.errors import EffctxError

Setting = str | int | float | bool | None


@dataclass(frozen=True)
class RuntimeIdentity:
    backend: str
    backend_version: str
    model_sha256: str
    # (name, value) pairs, sorted by name: frozen and hashable, unlike a dict.
    kv_settings: tuple[tuple[str, Setting], ...]
    # A policy that evicts and shifts leaves a cache that only means something to it.
    residency: str
    # How a conversation becomes text: a template's name and the digest of its source.
    prompt_template: str
    # Whether the tokenizer starts the tape with BOS: the same text then gives other tokens.
    add_bos: bool

    @classmethod
    def build(cls, backend: str, backend_version: str, model_sha256: str, kv_settings: Mapping[str, Setting],
              residency: str, prompt_template: str, add_bos: bool) -> "RuntimeIdentity":
        return cls(backend, backend_version, model_sha256, tuple(sorted(kv_settings.items())), residency,
                   prompt_template, add_bos)

    @property
    def settings(self) -> dict[str, Setting]:
        return dict(self.kv_settings)

    def setting(self, name: str) -> Setting:
        return self.settings.get(name)

    def to_dict(self) -> dict:
        return {
            "backend": self.backend,
            "backend_version": self.backend_version,
            "model_sha256": self.model_sha256,
            "kv_settings": self.settings,
            "residency": self.residency,
            "prompt_template": self.prompt_template,
            "add_bos": self.add_bos,
        }

    def _flat(self) -> dict[str, object]:
        flat = {k: v for k, v in self.to_dict().items() if k != "kv_settings"}
        flat.update({f"kv_settings.{k}": v for k, v in self.kv_settings})
        return flat

    def digest(self) -> str:
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def differences(self, other: "RuntimeIdentity") -> list[tuple[str, object, object]]:
        """(field, mine, theirs) for every field that differs; a backend setting only one
        side has shows None on the other."""
        mine, theirs = self._flat(), other._flat()
        return [(name, mine.get(name), theirs.get(name)) for name in sorted(mine.keys() | theirs.keys())
                if mine.get(name) != theirs.get(name)]


class IdentityMismatchError(EffctxError):
    """A snapshot made by another runtime identity: restoring it would mix KV states."""

    def __init__(self, expected: RuntimeIdentity, got: RuntimeIdentity):
        self.expected = expected
        self.got = got
        diff = ", ".join(
            f"{name} {mine!r} != {theirs!r}" for name, mine, theirs in expected.differences(got)
        )
        super().__init__(f"snapshot belongs to another runtime identity ({diff})")

    def __reduce__(self):
        return type(self), (self.expected, self.got)
