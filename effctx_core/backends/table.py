"""A backend's own profile table (`[llama]`, `[openvino]`, `[llama-server]`) checked
against the dataclass of its options, and read into it: each field's default gives its
type, so the key set, the type check and the unknown-key message all derive from the
one dataclass."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar

from effctx_core.errors import EffctxError

if TYPE_CHECKING:
    from effctx_core.profiles import Profile

# The backend's rule for a well-typed value: what is wrong with it ("must be 0 or more"), or None.
ValueCheck = Callable[[str, Any], "str | None"]
Options = TypeVar("Options")


def _type_problem(want: type, value: object) -> str | None:
    """What a TOML value for a field whose default is of type `want` must be ("bool, not
    int"), or None when it is that."""
    if want is float:  # TOML writes whole numbers as integers
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else f"a number, not {type(value).__name__}"
    if want is tuple:  # TOML arrays; the fields that take one take strings
        if not isinstance(value, (list, tuple)):
            return f"list, not {type(value).__name__}"
        return None if all(isinstance(item, str) for item in value) else "a list of strings"
    # TOML booleans are ints in Python: keep them apart
    ok = isinstance(value, want) and not (want is not bool and isinstance(value, bool))
    return None if ok else f"{want.__name__}, not {type(value).__name__}"


def table_problems(options_type: type, prefix: str, given: Iterable[tuple[str, object]], where: str,
                   check: ValueCheck | None = None) -> list[str]:
    """What is wrong with the given keys and values, one line each; each key is named
    with `prefix` ("openvino." for the table's own, "" for one read from the top level)."""
    known = [f.name for f in fields(options_type)]
    defaults = options_type()
    problems = []
    for key, value in given:
        if key not in known:
            problems.append(f"{where}: unknown key {prefix}{key} (known: {', '.join(known)})")
            continue
        wanted = _type_problem(type(getattr(defaults, key)), value)
        if wanted is not None:
            problems.append(f"{where}: {prefix}{key} must be {wanted}")
            continue
        problem = check(key, value) if check is not None else None
        if problem is not None:
            problems.append(f"{where}: {prefix}{key} {problem}")
    return problems


def options_from_table(options_type: type[Options], given: Iterable[tuple[str, object]]) -> Options:
    """A vetted table as typed options: arrays as tuples, whole numbers as floats where
    the field is a float."""
    defaults = options_type()
    values = {}
    for key, value in given:
        want = type(getattr(defaults, key))
        values[key] = tuple(value) if want is tuple else want(value) if want is float else value  # type: ignore[arg-type]
    return replace(defaults, **values)  # type: ignore[type-var]


def options_of(profile: Profile, options_type: type[Options], backend: str) -> Options:
    """The profile's typed options: its own, or the defaults for a profile made in code
    without them."""
    options = profile.backend_options
    if options is None:
        return options_type()
    if not isinstance(options, options_type):
        raise EffctxError(f"profile {profile.name!r}: {type(options).__name__} is not the {backend} backend's "
                          f"options ({options_type.__name__})")
    return options


def unknown_kv_types(profile: Profile, known: Iterable[str], where: str, on: str = "") -> list[str]:
    """A line for each of the profile's K and V cache types the backend does not take
    (`on`: " on openvino", where the names are another runtime's)."""
    names = tuple(known)
    return [f"{where}: unknown KV cache type {kind!r} for {side.upper()}{on} (known: {', '.join(names)})"
            for side, kind in (("k", profile.kv_cache_type_k), ("v", profile.kv_cache_type_v)) if kind not in names]

