"""Reading workload files: the built-in ones shipped in this package, or any TOML file.

A workload file holds:

    description = "..."            required
    prefix = '''...'''             required: the stable prefix (surrounding whitespace is dropped,
                                   the framing supplies the separators)
    base = "agent-loop"            optional, see below
    branch_after = 3               optional, with [[branches]]
    [framing]                      optional: user, tool, assistant (strings), stop (strings)
    [[turns]]                      required, one table a turn, in order:
    role = "user"                  "user" or "tool"
    text = '''...'''
    max_tokens = 64                1..2048
    expect = ["KESTREL-7"]         optional: a reply containing any of them is correct
    [edit]                         optional: before_turn, find, replace
    [[branches]]                   optional: name, and [[branches.turns]] like [[turns]]

`base = NAME` names a built-in workload whose prefix, turns and framing the file inherits,
so shared text exists once; each of those three that the file sets replaces the base's
whole. Nothing else is inherited, and the edit and the branches are checked against the
inherited prefix and turns. The workload's name is its file's name without ".toml".

Turn numbers in before_turn, branch_after and error messages count from 1.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import NoReturn

from effctx_core.bench.workloads.records import (
    MAX_REPLY_TOKENS,
    ROLES,
    Branch,
    Edit,
    Framing,
    Turn,
    Workload,
    WorkloadError,
)

_TOP_FIELDS = {"description", "prefix", "base", "framing", "turns", "edit", "branch_after", "branches"}
_TURN_FIELDS = {"role", "text", "max_tokens", "expect"}
_FRAMING_FIELDS = {"user", "tool", "assistant", "stop"}
_EDIT_FIELDS = {"before_turn", "find", "replace"}
_BRANCH_FIELDS = {"name", "turns"}
_SHOWN_CHARS = 40


def _builtin_root() -> Traversable:
    return resources.files(__package__ or "effctx_core.bench.workloads")


def workload_names() -> list[str]:
    """The built-in workloads, sorted."""
    return sorted(p.name[: -len(".toml")] for p in _builtin_root().iterdir() if p.name.endswith(".toml"))


def load_workload(name_or_path: str) -> Workload:
    """A built-in workload by name, or the workload in a .toml file."""
    if name_or_path.endswith(".toml") or "/" in name_or_path or os.sep in name_or_path:
        path = Path(name_or_path).expanduser()
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise WorkloadError(f"workload file not found: {path}") from None
        except OSError as exc:
            raise WorkloadError(f"cannot read workload file {path}: {exc.strerror or exc}") from None
        return _parse(data, path.stem, str(path), str(path))
    names = workload_names()
    if name_or_path not in names:
        raise WorkloadError(f"unknown workload {name_or_path!r} (built in: {', '.join(names)})")
    return _load_builtin(name_or_path)


def _load_builtin(name: str) -> Workload:
    data = (_builtin_root() / f"{name}.toml").read_bytes()
    return _parse(data, name, f"{name}.toml", "built-in")


# --------------------------------------------------------------------------- parsing


class _Reader:
    """Checks one file's fields; every failure names the file and the field."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, message: str) -> NoReturn:
        raise WorkloadError(f"workload {self.where}: {message}")

    def fields(self, table: dict, allowed: set[str], required: tuple[str, ...], place: str) -> None:
        unknown = sorted(set(table) - allowed)
        if unknown:
            self.fail(f"unknown field {unknown[0]!r}{_in(place)}")
        for key in required:
            if key not in table:
                self.fail(f"missing field {key!r}{_in(place)}")

    def text(self, value: object, field: str, empty_ok: bool = False) -> str:
        if not isinstance(value, str):
            self.fail(f"{field} must be a string (got {_show(value)})")
        if not empty_ok and not value.strip():
            self.fail(f"{field} must not be empty")
        return value

    def number(self, value: object, field: str, low: int, high: int) -> int:
        # TOML booleans are ints in Python: keep them apart.
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            self.fail(f"{field} must be a positive integer (got {_show(value)})")
        if not low <= value <= high:
            self.fail(f"{field} must be between {low} and {high} (got {value})")
        return value

    def strings(self, value: object, field: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
            self.fail(f"{field} must be an array of non-empty strings (got {_show(value)})")
        return tuple(value)

    def tables(self, value: object, field: str, spelling: str) -> list[dict]:
        if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
            self.fail(f"{field} must be an array of tables ({spelling})")
        if not value:
            self.fail(f"{field} must not be empty")
        return value

    def table(self, value: object, field: str) -> dict:
        if not isinstance(value, dict):
            self.fail(f"{field} must be a table ([{field}])")
        return value

    def turns(self, value: object, field: str, spelling: str) -> tuple[Turn, ...]:
        tables = self.tables(value, field, spelling)
        return tuple(self.turn(t, f"{field}[{i}]") for i, t in enumerate(tables, start=1))

    def turn(self, table: dict, place: str) -> Turn:
        self.fields(table, _TURN_FIELDS, ("role", "text", "max_tokens"), place)
        role = table["role"]
        if role not in ROLES:
            self.fail(f"{place}.role must be \"user\" or \"tool\" (got {_show(role)})")
        return Turn(
            role=role,
            text=self.text(table["text"], f"{place}.text"),
            max_tokens=self.number(table["max_tokens"], f"{place}.max_tokens", 1, MAX_REPLY_TOKENS),
            expect=self.strings(table.get("expect", []), f"{place}.expect"),
        )

    def framing(self, value: object) -> Framing:
        table = self.table(value, "framing")
        self.fields(table, _FRAMING_FIELDS, (), "[framing]")
        default = Framing()
        return Framing(
            user=self.text(table.get("user", default.user), "framing.user", empty_ok=True),
            tool=self.text(table.get("tool", default.tool), "framing.tool", empty_ok=True),
            assistant=self.text(table.get("assistant", default.assistant), "framing.assistant", empty_ok=True),
            stop=self.strings(table.get("stop", list(default.stop)), "framing.stop"),
        )

    def edit(self, value: object, prefix: str, n_turns: int) -> Edit:
        table = self.table(value, "edit")
        self.fields(table, _EDIT_FIELDS, ("before_turn", "find", "replace"), "[edit]")
        edit = Edit(
            before_turn=self.number(table["before_turn"], "edit.before_turn", 1, n_turns),
            find=self.text(table["find"], "edit.find"),
            replace=self.text(table["replace"], "edit.replace", empty_ok=True),
        )
        if edit.replace == edit.find:
            self.fail("edit.replace must differ from edit.find")
        found = prefix.count(edit.find)
        if found != 1:
            self.fail(f"edit.find must occur exactly once in the prefix (found {found} times)")
        return edit

    def branches(self, value: object) -> tuple[Branch, ...]:
        found: list[Branch] = []
        for i, table in enumerate(self.tables(value, "branches", "[[branches]]"), start=1):
            place = f"branches[{i}]"
            self.fields(table, _BRANCH_FIELDS, ("name", "turns"), place)
            name = self.text(table["name"], f"{place}.name")
            if any(b.name == name for b in found):
                self.fail(f"{place}.name {name!r} is used twice")
            found.append(Branch(name=name, turns=self.turns(table["turns"], f"{place}.turns", "[[branches.turns]]")))
        return tuple(found)


def _in(place: str) -> str:
    return f" in {place}" if place else ""


def _show(value: object) -> str:
    """A value as TOML would spell it, cut short: error messages stay on one line."""
    shown = json.dumps(value, ensure_ascii=False, default=str)
    return shown if len(shown) <= _SHOWN_CHARS else shown[: _SHOWN_CHARS - 3] + "..."


def _parse(data: bytes, name: str, where: str, source: str) -> Workload:
    read = _Reader(where)
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        read.fail("not UTF-8 text")
    except tomllib.TOMLDecodeError as exc:
        read.fail(f"not valid TOML: {' '.join(str(exc).split())}")
    # With a base, the prefix and the turns may come from it.
    required = ("description",) if "base" in table else ("description", "prefix", "turns")
    read.fields(table, _TOP_FIELDS, required, "")
    # Without a base, the prefix and the turns are required, so only the framing falls back.
    base = _base(read, table) or Workload(name, "", "", (), Framing())
    prefix = read.text(table["prefix"], "prefix").strip() if "prefix" in table else base.prefix
    turns = read.turns(table["turns"], "turns", "[[turns]]") if "turns" in table else base.turns
    framing = read.framing(table["framing"]) if "framing" in table else base.framing
    edit = read.edit(table["edit"], prefix, len(turns)) if "edit" in table else None
    branch_after = None
    if "branch_after" in table:
        branch_after = read.number(table["branch_after"], "branch_after", 1, len(turns))
    branches = read.branches(table["branches"]) if "branches" in table else ()
    if branch_after is not None and not branches:
        read.fail("branch_after is set but there are no [[branches]]")
    if branches and branch_after is None:
        read.fail("[[branches]] need branch_after (the turn whose reply they restore)")
    return Workload(
        name=name,
        description=read.text(table["description"], "description"),
        prefix=prefix,
        turns=turns,
        framing=framing,
        edit=edit,
        branch_after=branch_after,
        branches=branches,
        # A workload built on a base runs the base's text too: its digest covers both.
        digest=hashlib.sha256(data + (base.digest.encode() if "base" in table else b"")).hexdigest(),
        source=source,
    )


def _base(read: _Reader, table: dict) -> Workload | None:
    if "base" not in table:
        return None
    value = read.text(table["base"], "base")
    names = workload_names()
    if value not in names:
        read.fail(f"base {value!r} is not a built-in workload (built in: {', '.join(names)})")
    return _load_builtin(value)
