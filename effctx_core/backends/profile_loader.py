"""Profiles read from TOML, checked and found. A profile is checked here, where it is
loaded, against its backend's spec (its own table, its checks), never by the record.

A profile's TOML holds the settings every backend shares at the top level, the backend's
own options in its table (`[llama]`, `[openvino]`, `[llama-server]`) and `[residency]`.
A profile written for an earlier effctx, with llama.cpp's settings at the top level,
still loads: each such key is read into the table, with a one-line note saying where it
belongs now.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import asdict, fields
from importlib import resources
from pathlib import Path
from typing import Any, Callable, get_type_hints

import platformdirs

from effctx_core.backends.registry import BACKENDS, BackendSpec, spec
from effctx_core.backends.table import options_from_table, table_problems
from effctx_core.errors import EffctxError
from effctx_core.profiles import DEFAULT_PROFILE_NAME, Profile, ProfileError
from effctx_core.residency.config import ResidencyConfig, check_residency

NoteFn = Callable[[str], None]
# The settings every backend shares, at a profile's top level.
SHARED_KEYS = tuple(f.name for f in fields(Profile) if f.name not in ("name", "residency", "backend_options",
                                                                      "backend_table"))
_RESIDENCY_KEYS = tuple(f.name for f in fields(ResidencyConfig))


def _wanted(hint: Any) -> tuple[type, ...]:
    """The TOML value types a field's annotation takes (`str | None`: a string)."""
    args = getattr(hint, "__args__", None)
    return tuple(a for a in args if a is not type(None)) if args else (hint,)


_SHARED_TYPES = {k: _wanted(v) for k, v in get_type_hints(Profile).items() if k in SHARED_KEYS}
_RESIDENCY_TYPES = {k: _wanted(v) for k, v in get_type_hints(ResidencyConfig).items()}


def _check_types(table: dict, types: dict[str, tuple[type, ...]], where: str, prefix: str = "") -> None:
    for key, value in table.items():
        want = types[key]
        # TOML booleans are ints in Python: keep them apart.
        if not isinstance(value, want) or (bool not in want and isinstance(value, bool)):
            raise ProfileError(f"{where}: {prefix}{key} must be {want[0].__name__}, not {type(value).__name__}")


# --------------------------------------------------------------------------- checking


def check_profile(profile: Profile) -> Profile:
    """The profile, or ProfileError with the first thing wrong with it: the shared
    settings, the residency section and what its backend checks."""
    where = f"profile {profile.name!r}"
    if profile.n_ctx < 16:
        raise ProfileError(f"{where}: n_ctx {profile.n_ctx} is too small (minimum 16)")
    if profile.n_batch < 1:
        raise ProfileError(f"{where}: n_batch {profile.n_batch} must be positive")
    if profile.threads < 0:
        raise ProfileError(f"{where}: threads must be 0 (all free cores) or more")
    try:
        problems = spec(profile.backend).check(profile, where)
    except EffctxError as exc:  # a backend that is unknown
        raise ProfileError(f"{where}: {exc}") from None
    if problems:
        raise ProfileError(problems[0])
    try:
        check_residency(profile.residency, where)
    except EffctxError as exc:
        raise ProfileError(str(exc)) from None
    if profile.residency.budget > profile.n_ctx:
        raise ProfileError(f"{where}: residency budget {profile.residency.budget} is above n_ctx {profile.n_ctx}")
    return profile


# --------------------------------------------------------------------------- reading


def _backend_of(data: dict, where: str) -> BackendSpec:
    backend = data.get("backend", "llama")
    if not isinstance(backend, str):
        raise ProfileError(f"{where}: backend must be str, not {type(backend).__name__}")
    try:
        return spec(backend)
    except EffctxError as exc:
        raise ProfileError(f"{where}: {exc}") from None


def _table(data: dict, own: BackendSpec, where: str) -> dict:
    """The backend's own table, taken out of `data`; another backend's table is refused."""
    tables = {name: data.pop(name) for name in BACKENDS if name in data}
    for name, table in tables.items():
        if name != own.name:
            raise ProfileError(f"{where}: [{name}] settings on a {own.name} profile "
                               f"(set backend = {name!r} or remove the table)")
        if not isinstance(table, dict):
            raise ProfileError(f"{where}: {name} must be a table")
    return dict(tables.get(own.name, {}))


def _moved(data: dict, table: dict, own: BackendSpec, where: str, note: NoteFn) -> None:
    """Read the top-level keys an earlier effctx took into the backend's table, saying so
    (a wrong value is named as it was written, at the top level)."""
    for key in [k for k in own.moved_keys if k in data]:
        if key in table:
            raise ProfileError(f"{where}: {key} is set twice, at the top and as {own.name}.{key} "
                               f"(keep the [{own.name}] one)")
        problems = table_problems(own.options, "", [(key, data[key])], where, own.value_check)
        if problems:
            raise ProfileError(problems[0])
        table[key] = data.pop(key)
        note(f"{where}: {key} belongs in the [{own.name}] table now ({own.name}.{key}); read from the top level")


def _others(data: dict, own: BackendSpec, where: str) -> None:
    """Refuse the settings of another backend at the top level."""
    others = {k for name in BACKENDS if name != own.name for k in (*spec(name).option_names(), *spec(name).moved_keys)}
    foreign = sorted(k for k in set(data) & others if k not in SHARED_KEYS)
    if foreign:
        raise ProfileError(f"{where}: {', '.join(foreign)} {'is a setting' if len(foreign) == 1 else 'are settings'} "
                           f"the {own.name} backend does not read")


def profile_from_toml(text: str, name: str, where: str, note: NoteFn = lambda line: None) -> Profile:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{where}: not valid TOML: {exc}") from None
    residency = data.pop("residency", {})
    if not isinstance(residency, dict):
        raise ProfileError(f"{where}: residency must be a table")
    own = _backend_of(data, where)
    table = _table(data, own, where)
    _moved(data, table, own, where, note)
    _others(data, own, where)
    unknown = sorted(set(data) - set(SHARED_KEYS)) + sorted(f"residency.{k}" for k in set(residency) - set(_RESIDENCY_KEYS))
    if unknown:
        raise ProfileError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    _check_types(data, _SHARED_TYPES, where)
    _check_types(residency, _RESIDENCY_TYPES, where, "residency.")
    problems = table_problems(own.options, f"{own.name}.", table.items(), where, own.value_check)
    if problems:
        raise ProfileError(problems[0])
    return check_profile(Profile(name=name, residency=ResidencyConfig(**residency),
                                 backend_options=options_from_table(own.options, table.items()),
                                 backend_table=tuple(sorted(table.items())), **data))


# --------------------------------------------------------------------------- what an earlier effctx wrote


def legacy_settings(profile: Profile) -> dict:
    """The profile as a record in the shape it had before backend tables (llama.cpp's
    settings at the top level, the other tables as `options`): what `effctx profiles
    --json` shows and what a certificate's profile digest is computed from."""
    own = spec(profile.backend)
    options = own.options_of(profile)
    llama = spec("llama")
    top = {k: getattr(llama.options(), k) for k in llama.moved_keys}  # every profile had them
    top.update({k: getattr(options, k) for k in own.moved_keys})
    return {
        "name": profile.name, "description": profile.description, "backend": profile.backend,
        "model": profile.model, "n_ctx": profile.n_ctx, "n_batch": profile.n_batch, "threads": profile.threads,
        "kv_cache_type_k": profile.kv_cache_type_k, "kv_cache_type_v": profile.kv_cache_type_v, **top,
        "residency": asdict(profile.residency),
        "options": tuple((k, v) for k, v in profile.backend_table if k not in own.moved_keys),
    }


# --------------------------------------------------------------------------- finding


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


def load_profile(name_or_path: str | None, note: NoteFn = lambda line: None) -> Profile:
    """A profile by name (user dir first, then built-in) or by the path of a TOML file;
    `note` gets the one-line notes of an old-style profile."""
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
        return profile_from_toml(text, candidate.stem, str(candidate), note)
    user_file = user_profiles_dir() / f"{name_or_path}.toml"
    if user_file.is_file():
        return profile_from_toml(user_file.read_text(encoding="utf-8"), name_or_path, str(user_file), note)
    builtin = _builtin_files()
    if name_or_path in builtin:
        return profile_from_toml(builtin[name_or_path], name_or_path, f"built-in profile {name_or_path}", note)
    raise ProfileError(f"unknown profile {name_or_path!r} (available: {', '.join(available_profiles())})")
