"""A backend's own profile table (`[openvino]`, `[llama-server]`) checked against the
dataclass of its options: unknown keys and wrongly typed values, one line each."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, Iterable

# The backend's rule for a well-typed value: what is wrong with it ("must be 0 or more"), or None.
ValueCheck = Callable[[str, Any], "str | None"]


def table_problems(options_type: type, table: str, given: Iterable[tuple[str, object]], where: str,
                   check: ValueCheck | None = None) -> list[str]:
    known = [f.name for f in fields(options_type)]
    defaults = options_type()
    problems = []
    for key, value in given:
        if key not in known:
            problems.append(f"{where}: unknown key {table}.{key} (known: {', '.join(known)})")
            continue
        want = type(getattr(defaults, key))
        if want is float:  # TOML writes whole numbers as integers
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:  # TOML booleans are ints in Python: keep them apart
            ok = isinstance(value, want) and not (want is not bool and isinstance(value, bool))
        if not ok:
            name = "a number" if want is float else want.__name__
            problems.append(f"{where}: {table}.{key} must be {name}, not {type(value).__name__}")
            continue
        problem = check(key, value) if check is not None else None
        if problem is not None:
            problems.append(f"{where}: {table}.{key} {problem}")
    return problems
