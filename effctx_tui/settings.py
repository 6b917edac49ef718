"""The console's own settings, `<platformdirs user config dir>/effctx/settings.toml`.

A flat table of scalars (today only `theme`), rewritten whole and atomically on every
change, so a crash mid-write leaves the previous file, never half of one.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import platformdirs

from effctx_core.atomic import atomic_write_bytes
from effctx_core.errors import EffctxError
from effctx_core.user_files import os_reason, quarantine_file


def settings_path() -> Path:
    return Path(platformdirs.user_config_dir("effctx", appauthor=False)) / "settings.toml"


def read_settings() -> tuple[dict, str | None]:
    """The settings and a one-line warning if the file exists but cannot be used."""
    path = settings_path()
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")), None
    except FileNotFoundError:
        return {}, None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        # Moved aside, so that the next change writes a new file instead of over it.
        try:
            moved = quarantine_file(path)
        except EffctxError as error:
            return {}, f"Settings file {path} ignored: {exc} ({error})"
        return {}, f"Settings file {path} was damaged ({exc}): moved to {moved}"
    except OSError as exc:
        return {}, f"Settings file {path} ignored: {os_reason(exc)}"


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        # a JSON string with ASCII escapes is also a valid TOML basic string
        return json.dumps(value)
    raise TypeError(f"settings hold scalars, not {type(value).__name__}")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def write_setting(key: str, value: object) -> None:
    settings, warning = read_settings()
    if warning is not None and settings_path().exists():
        raise EffctxError(f"{warning}: not written over")
    settings[key] = value
    scalars = {k: v for k, v in settings.items() if not isinstance(v, (dict, list))}
    text = "".join(f"{_toml_key(k)} = {_toml_value(v)}\n" for k, v in sorted(scalars.items()))
    atomic_write_bytes(settings_path(), text.encode("utf-8"))
