"""Runtime profiles: named TOML documents that fix everything changing KV contents or capacity.

Built-in profiles ship in `effctx_core/builtin_profiles/`; user profiles live in
`<platformdirs user config dir>/effctx/profiles/NAME.toml`. `--profile NAME|PATH` picks one.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path

import platformdirs

from effctx_core.backends.registry import REGISTRY, backend_keys, profile_problems
from effctx_core.errors import EffctxError
from effctx_core.residency.config import ResidencyConfig

DEFAULT_PROFILE_NAME = "exact"


class ProfileError(EffctxError):
    pass


def default_threads() -> int:
    # llama.cpp spins its threads; more threads than free cores halves decode speed
    # (measured: 2 threads with one of 2 cores busy decode 21 tok/s, against 53 idle).
    return max(1, len(os.sched_getaffinity(0)))


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
    # Off by default: with it on, a restored llama.cpp state drifts from the original
    # (measured max|dlogit| about 1), so bit-exact snapshot replay needs it off.
    flash_attn: bool = False
    swa_full: bool = True
    # llama: ggml RPC workers ("host:port") that hold the model's layers and KV cache.
    rpc_workers: tuple[str, ...] = ()
    # llama with rpc_workers: the longest silence from a worker before the session is
    # given up as poisoned (a model upload gets this plus its size at 10 MB/s).
    rpc_timeout_s: float = 60.0
    residency: ResidencyConfig = field(default_factory=ResidencyConfig)
    # The backend's own table (`[openvino]` in TOML), as sorted (key, value) pairs: the
    # backend checks and reads it, the profile only carries it.
    options: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        where = f"profile {self.name!r}"
        if self.n_ctx < 16:
            raise ProfileError(f"{where}: n_ctx {self.n_ctx} is too small (minimum 16)")
        if self.n_batch < 1:
            raise ProfileError(f"{where}: n_batch {self.n_batch} must be positive")
        if self.threads < 0:
            raise ProfileError(f"{where}: threads must be 0 (all free cores) or more")
        if not math.isfinite(self.rpc_timeout_s) or self.rpc_timeout_s <= 0:
            raise ProfileError(f"{where}: rpc_timeout_s must be a positive number of seconds")
        try:
            problems = profile_problems(self, where)
        except EffctxError as exc:  # a backend that is unknown, or not in this build
            raise ProfileError(f"{where}: {exc}") from None
        if problems:
            raise ProfileError(problems[0])
        try:
            self.residency.validate(where)
        except EffctxError as exc:
            raise ProfileError(str(exc)) from None
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


# --------------------------------------------------------------------------- loading

_TOP_KEYS = {f.name for f in fields(Profile)} - {"name", "residency", "options"}
_RESIDENCY_KEYS = {f.name for f in fields(ResidencyConfig)}
_TYPES: dict[str, type | tuple[type, ...]] = {
    "description": str, "backend": str, "model": str, "n_ctx": int, "n_batch": int, "threads": int,
    "kv_cache_type_k": str, "kv_cache_type_v": str, "flash_attn": bool, "swa_full": bool,
    "rpc_workers": list, "rpc_timeout_s": (int, float),
    "policy": str, "sink_tokens": int, "recent_tokens": int, "budget": int, "block_size": int, "slide_tokens": int,
}


def _check_types(table: dict, where: str, prefix: str = "") -> None:
    for key, value in table.items():
        want = _TYPES[key]
        # TOML booleans are ints in Python: keep them apart.
        ok = isinstance(value, want) and not (want is not bool and isinstance(value, bool))
        if not ok:
            name = "a number" if isinstance(want, tuple) else want.__name__
            raise ProfileError(f"{where}: {prefix}{key} must be {name}, not {type(value).__name__}")
        if want is list and not all(isinstance(item, str) for item in value):
            raise ProfileError(f"{where}: {prefix}{key} must be a list of strings")


def profile_from_toml(text: str, name: str, where: str) -> Profile:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{where}: not valid TOML: {exc}") from None
    residency = data.pop("residency", {})
    if not isinstance(residency, dict):
        raise ProfileError(f"{where}: residency must be a table")
    backend = data.get("backend", "llama")
    tables = {key: data.pop(key) for key in list(data) if key in REGISTRY}
    for table_name, table in tables.items():
        if table_name != backend:
            raise ProfileError(f"{where}: [{table_name}] settings on a {backend} profile "
                               f"(set backend = {table_name!r} or remove the table)")
        if not isinstance(table, dict):
            raise ProfileError(f"{where}: {table_name} must be a table")
    if backend in REGISTRY and REGISTRY[backend].available:
        foreign = sorted(k for k in set(data) & _TOP_KEYS if k not in backend_keys(backend))
        if foreign:
            raise ProfileError(f"{where}: {', '.join(foreign)} {'is a setting' if len(foreign) == 1 else 'are settings'} "
                               f"the {backend} backend does not read")
    unknown = sorted(set(data) - _TOP_KEYS) + sorted(f"residency.{k}" for k in set(residency) - _RESIDENCY_KEYS)
    if unknown:
        raise ProfileError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    _check_types(data, where)
    _check_types(residency, where, "residency.")
    options = tuple(sorted(tables.get(backend, {}).items()))
    if "rpc_workers" in data:
        data["rpc_workers"] = tuple(data["rpc_workers"])
    if "rpc_timeout_s" in data:
        data["rpc_timeout_s"] = float(data["rpc_timeout_s"])
    return Profile(name=name, residency=ResidencyConfig(**residency), options=options, **data)


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
