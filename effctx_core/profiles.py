"""Runtime profiles: named TOML documents that fix everything changing KV contents or capacity.

Built-in profiles ship in `effctx_core/builtin_profiles/`; user profiles live in
`<platformdirs user config dir>/effctx/profiles/NAME.toml`. `--profile NAME|PATH` picks one.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path

import platformdirs

from effctx_core.capacity import PLAIN_V_TYPES
from effctx_core.errors import EffctxError

# ggml type ids of the cache element types llama.cpp accepts for K and V.
KV_CACHE_TYPES: dict[str, int] = {
    "f32": 0,
    "f16": 1,
    "q4_0": 2,
    "q4_1": 3,
    "q5_0": 6,
    "q5_1": 7,
    "q8_0": 8,
    "iq4_nl": 20,
    "bf16": 30,
}
POLICIES = ("none", "streaming", "budget", "scored")
# The policies whose plans keep to the budget (streaming keeps its windows whatever it is).
BUDGET_POLICIES = ("budget", "scored")
BACKENDS = ("llama",)
DEFAULT_PROFILE_NAME = "exact"


class ProfileError(EffctxError):
    pass


def default_threads() -> int:
    # llama.cpp spins its threads; more threads than free cores halves decode speed
    # (shared/notes: nt=2 with one core busy 21 tok/s vs 53).
    return max(1, len(os.sched_getaffinity(0)))


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
    def evicts(self) -> bool:
        """Whether the policy takes tokens out of the cache (every policy but none)."""
        return self.policy != "none"

    def validate(self, where: str) -> None:
        if self.policy not in POLICIES:
            raise ProfileError(f"{where}: unknown residency policy {self.policy!r} (known: {', '.join(POLICIES)})")
        for name in ("sink_tokens", "recent_tokens", "budget"):
            if getattr(self, name) < 0:
                raise ProfileError(f"{where}: residency.{name} must be 0 or more")
        if self.block_size < 1:
            raise ProfileError(f"{where}: residency.block_size must be at least 1")
        if self.slide_tokens < 1:
            raise ProfileError(f"{where}: residency.slide_tokens must be at least 1")
        if not self.evicts:
            return
        for name in ("sink_tokens", "recent_tokens"):
            if getattr(self, name) % self.block_size:
                raise ProfileError(
                    f"{where}: residency.{name} {getattr(self, name)} is not a multiple of block_size {self.block_size}"
                )
        if self.budget and self.sink_tokens + self.recent_tokens > self.budget:
            raise ProfileError(
                f"{where}: sink_tokens {self.sink_tokens} + recent_tokens {self.recent_tokens} "
                f"is above the budget {self.budget}"
            )


@dataclass(frozen=True)
class Profile:
    name: str = DEFAULT_PROFILE_NAME
    description: str = ""
    backend: str = "llama"
    model: str | None = None
    n_ctx: int = 4096
    n_batch: int = 512
    threads: int = 0
    kv_cache_type_k: str = "f16"
    kv_cache_type_v: str = "f16"
    # Off by default: bit-exact snapshot replay needs it off (shared/notes pitfall 7).
    flash_attn: bool = False
    swa_full: bool = True
    residency: ResidencyConfig = field(default_factory=ResidencyConfig)

    def __post_init__(self) -> None:
        where = f"profile {self.name!r}"
        if self.backend not in BACKENDS:
            raise ProfileError(f"{where}: unknown backend {self.backend!r} (known: {', '.join(BACKENDS)})")
        for side in ("k", "v"):
            kind = getattr(self, f"kv_cache_type_{side}")
            if kind not in KV_CACHE_TYPES:
                raise ProfileError(
                    f"{where}: unknown KV cache type {kind!r} for {side.upper()} (known: {', '.join(KV_CACHE_TYPES)})"
                )
        if self.n_ctx < 16:
            raise ProfileError(f"{where}: n_ctx {self.n_ctx} is too small (minimum 16)")
        if self.n_batch < 1:
            raise ProfileError(f"{where}: n_batch {self.n_batch} must be positive")
        if self.threads < 0:
            raise ProfileError(f"{where}: threads must be 0 (all free cores) or more")
        if self.kv_cache_type_v not in PLAIN_V_TYPES and not self.flash_attn:
            raise ProfileError(
                f"{where}: V cache type {self.kv_cache_type_v} needs flash_attn = true "
                "(llama.cpp cannot create a context with a quantized V cache without it)"
            )
        self.residency.validate(where)
        if self.residency.budget > self.n_ctx:
            raise ProfileError(f"{where}: residency budget {self.residency.budget} is above n_ctx {self.n_ctx}")

    @property
    def n_threads(self) -> int:
        return self.threads or default_threads()

    @property
    def budget_tokens(self) -> int:
        return self.residency.budget or self.n_ctx

    def with_changes(self, **changes) -> "Profile":
        return replace(self, **changes)

    def kv_fields(self) -> dict:
        """Every field that changes what the KV cache holds for a given token list."""
        r = self.residency
        return {
            "kv_cache_type_k": self.kv_cache_type_k,
            "kv_cache_type_v": self.kv_cache_type_v,
            "flash_attn": self.flash_attn,
            # llama.cpp's kernels give other numbers for other batch sizes (measured
            # max|dlogit| 1.1 between a 1- and a 14-token batch), so the batch is part of it.
            "n_batch": self.n_batch,
            "residency": f"{r.policy}:{r.sink_tokens}:{r.recent_tokens}:{r.budget}:{r.block_size}",
        }


# --------------------------------------------------------------------------- loading

_TOP_KEYS = {f.name for f in fields(Profile)} - {"name", "residency"}
_RESIDENCY_KEYS = {f.name for f in fields(ResidencyConfig)}
_TYPES = {
    "description": str, "backend": str, "model": str, "n_ctx": int, "n_batch": int, "threads": int,
    "kv_cache_type_k": str, "kv_cache_type_v": str, "flash_attn": bool, "swa_full": bool,
    "policy": str, "sink_tokens": int, "recent_tokens": int, "budget": int, "block_size": int, "slide_tokens": int,
}


def _check_types(table: dict, where: str, prefix: str = "") -> None:
    for key, value in table.items():
        want = _TYPES[key]
        # TOML booleans are ints in Python: keep them apart.
        ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
        if not ok:
            raise ProfileError(f"{where}: {prefix}{key} must be {want.__name__}, not {type(value).__name__}")


def profile_from_toml(text: str, name: str, where: str) -> Profile:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{where}: not valid TOML: {exc}") from None
    residency = data.pop("residency", {})
    if not isinstance(residency, dict):
        raise ProfileError(f"{where}: residency must be a table")
    unknown = sorted(set(data) - _TOP_KEYS) + sorted(f"residency.{k}" for k in set(residency) - _RESIDENCY_KEYS)
    if unknown:
        raise ProfileError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    _check_types(data, where)
    _check_types(residency, where, "residency.")
    return Profile(name=name, residency=ResidencyConfig(**residency), **data)


def user_profiles_dir() -> Path:
    return Path(platformdirs.user_config_dir("effctx", appauthor=False)) / "profiles"


def _builtin_files() -> dict[str, str]:
    root = resources.files("effctx_core") / "builtin_profiles"
    return {p.name[: -len(".toml")]: p.read_text(encoding="utf-8") for p in root.iterdir() if p.name.endswith(".toml")}


def available_profiles() -> dict[str, str]:
    """Profile name -> where it comes from ('built-in' or a file path); user profiles win."""
    found = {name: "built-in" for name in _builtin_files()}
    user = user_profiles_dir()
    if user.is_dir():
        for path in sorted(user.glob("*.toml")):
            found[path.stem] = str(path)
    return dict(sorted(found.items()))


def load_profile(name_or_path: str | None) -> Profile:
    """A profile by name (user dir first, then built-in) or by the path of a TOML file."""
    if not name_or_path:
        name_or_path = DEFAULT_PROFILE_NAME
    candidate = Path(name_or_path).expanduser()
    if name_or_path.endswith(".toml") or os.sep in name_or_path:
        try:
            text = candidate.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ProfileError(f"profile file not found: {candidate}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ProfileError(f"cannot read profile file {candidate}: {exc}") from None
        return profile_from_toml(text, candidate.stem, str(candidate))
    user_file = user_profiles_dir() / f"{name_or_path}.toml"
    if user_file.is_file():
        return profile_from_toml(user_file.read_text(encoding="utf-8"), name_or_path, str(user_file))
    builtin = _builtin_files()
    if name_or_path in builtin:
        return profile_from_toml(builtin[name_or_path], name_or_path, f"built-in profile {name_or_path}")
    raise ProfileError(f"unknown profile {name_or_path!r} (available: {', '.join(available_profiles())})")


DEFAULT_PROFILE = Profile()
