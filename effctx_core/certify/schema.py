"""The certificate's JSON Schema (draft 2020-12, shipped in the package) and the check
every certificate passes before it is written and after it is read.

The schema holds what JSON Schema can say; `_cross_checks` holds the few rules that
compare two fields of one record (found <= trials), which JSON Schema cannot express.

The stages of a resumable certification (runner.py) keep the parts of the certificate
they make in its partial file; `stage_problem` checks one read back against the parts of
this same schema (STAGE_SCHEMAS points into it), so a stage that could not make a valid
certificate is found when it is read, not after minutes of measuring the other stages.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any, Iterable

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from effctx_core.errors import EffctxError

SCHEMA_VERSION = 1
SCHEMA_RESOURCE = "certificate.schema.json"

# jsonschema quotes the offending value in its message; a whole sub-document quoted there
# would make an unreadable "one line", so the message is cut at this many characters.
_MAX_MESSAGE = 240


class CertificateError(EffctxError):
    """A certificate document or file that cannot be used: invalid, damaged, unwritable."""


@functools.cache
def certificate_schema() -> dict:
    text = resources.files("effctx_core.certify").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")
    schema = json.loads(text)
    Draft202012Validator.check_schema(schema)
    return schema


@functools.cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(certificate_schema())


def json_path(parts: Iterable[Any]) -> str:
    """`context.certified`, `gates[1].passed`; "top level" for the document itself."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "top level"


def _short(message: str) -> str:
    message = " ".join(message.split())
    return message if len(message) <= _MAX_MESSAGE else message[: _MAX_MESSAGE - 1] + "…"


def _passkey_problem(passkey: dict, at: str) -> str | None:
    """Rules between fields of the passkey grid (`quality.passkey`, found at `at`)."""
    for i, row in enumerate(passkey["by_length"]):
        where = f"{at}by_length[{i}]"
        for key in ("found", "needle_resident"):
            if row[key] > row["trials"]:
                return f"{where}.{key}: {row[key]} is more than its trials ({row['trials']})"
        if row["ci_low"] > row["ci_high"]:
            return f"{where}.ci_low: {row['ci_low']} is above ci_high ({row['ci_high']})"
    control = passkey["control"]
    if control["false_keys"] > control["trials"]:
        return f"{at}control.false_keys: {control['false_keys']} is more than its trials ({control['trials']})"
    return None


def _task_problem(grid: dict, at: str) -> str | None:
    """Rules between fields of a task family's grid (`quality.tasks.<family>`, found at `at`)."""
    for i, row in enumerate(grid["by_length"]):
        where = f"{at}by_length[{i}]"
        for key, most in (("full", "trials"), ("needles_resident", "trials"), ("made_up", "control_trials")):
            if row[key] > row[most]:
                return f"{where}.{key}: {row[key]} is more than its {most} ({row[most]})"
        if row["ci_low"] > row["ci_high"]:
            return f"{where}.ci_low: {row['ci_low']} is above ci_high ({row['ci_high']})"
    if grid["prefilled"] > grid["prompt_tokens"]:
        return f"{at}prefilled: {grid['prefilled']} is more than its prompt_tokens ({grid['prompt_tokens']})"
    return None


def _cross_checks(doc: dict) -> str | None:
    """Rules between fields of one record, on a document that already passed the schema."""
    problem = _passkey_problem(doc["quality"]["passkey"], "quality.passkey.")
    for family, grid in doc["quality"].get("tasks", {}).items():
        problem = problem or _task_problem(grid, f"quality.tasks.{family}.")
    if problem is not None:
        return problem
    seen: set[str] = set()
    for i, gate in enumerate(doc["gates"]):
        if gate["name"] in seen:
            return f"gates[{i}].name: gate '{gate['name']}' is listed twice"
        seen.add(gate["name"])
    return None


def first_problem(doc: Any) -> str | None:
    """`<json path>: <message>` of the first thing wrong with the document, or None."""
    if not isinstance(doc, dict):
        return f"top level: the document is a JSON {type(doc).__name__}, not an object"
    # iter_errors follows the schema file's key order (an object's properties, listed in
    # document order, then its required keys, then its extra keys), so the first error
    # of a document is the same on every run.
    error = next(iter(_validator().iter_errors(doc)), None)
    if error is not None:
        return f"{json_path(error.absolute_path)}: {_short(error.message)}"
    return _cross_checks(doc)


def _label(doc: Any) -> str:
    cell = doc.get("cell") if isinstance(doc, dict) else None
    profile = cell.get("profile") if isinstance(cell, dict) else None
    return f"certificate {profile}" if isinstance(profile, str) and profile else "certificate"


def check_document(doc: dict) -> None:
    """Raise CertificateError("certificate <profile>: <json path>: <message>") unless the
    document is a valid certificate of this schema version. `digest` may be absent."""
    problem = first_problem(doc)
    if problem is not None:
        raise CertificateError(f"{_label(doc)}: {problem}")


# --------------------------------------------------------------------------- stages


def _part(pointer: str) -> dict:
    """A part of the certificate schema, by its JSON pointer."""
    return {"$ref": f"{certificate_schema()['$id']}{pointer}"}


def _record(**fields: dict) -> dict:
    return {"type": "object", "properties": fields, "required": list(fields), "additionalProperties": False}


def _stage_schemas() -> dict[str, dict]:
    """What each stage keeps, by its kind: the certificate's parts it makes, and the few
    figures the certificate sums up (a workload's accounting problems)."""
    return {
        "throughput": _record(throughput=_part("#/properties/throughput"),
                              load=_part("#/properties/load/properties/throughput")),
        "passkey": _record(passkey=_part("#/properties/quality/properties/passkey"), task=_part("#/$defs/task_grid")),
        "task": _part("#/$defs/task_grid"),
        "nll": _part("#/properties/quality/properties/nll"),
        "workload": _record(workload=_part("#/$defs/workload"), accounting={"type": "array", "items": {"type": "string"}}),
    }


STAGE_KINDS = ("throughput", "passkey", "task", "nll", "workload")


def stage_kind(name: str) -> str | None:
    """`workload:agent-loop` -> `workload`, `task:multikey` -> `task`; None for a name no stage has."""
    kind = name.split(":", 1)[0] if name.startswith(("workload:", "task:")) else name
    return kind if kind in STAGE_KINDS else None


@functools.cache
def _stage_validator(kind: str) -> Draft202012Validator:
    schema = certificate_schema()
    registry: Registry = Registry().with_resource(schema["$id"], Resource.from_contents(schema))
    return Draft202012Validator(_stage_schemas()[kind], registry=registry)


def stage_problem(name: str, value: Any) -> str | None:
    """`<json path>: <message>` of the first thing wrong with a stored stage, or None."""
    kind = stage_kind(name)
    if kind is None:
        return f"no stage is called {name!r}"
    error = next(iter(_stage_validator(kind).iter_errors(value)), None)
    if error is not None:
        return f"{json_path(error.absolute_path)}: {_short(error.message)}"
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return "a number is NaN or infinite"
    if kind == "passkey":
        return _passkey_problem(value["passkey"], "passkey.") or _task_problem(value["task"], "task.")
    if kind == "task":
        return _task_problem(value, "")
    return None
