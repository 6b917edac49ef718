"""Record helpers for certificate documents: the canonical bytes and digest that seal
one, the UTC timestamp it carries, a gate record, and a complete valid example.

A certificate is plain JSON data (dicts, lists, str, int, float, bool, None) so that the
file, the schema and the code agree on one shape; certificate.schema.json is that shape.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from typing import Any

from effctx_core.certify.schema import SCHEMA_VERSION, CertificateError

GATE_NAMES = ("passkey", "nll", "accounting", "throughput")


def unsealed(doc: dict) -> dict:
    """The document without its `digest`: what the digest is computed over."""
    return {key: value for key, value in doc.items() if key != "digest"}


def canonical_bytes(doc: dict) -> bytes:
    """The canonical JSON of the document without `digest`: sorted keys, no spaces,
    UTF-8 (ensure_ascii off). NaN and infinities are refused: they are not JSON, and
    a file holding them would not read back in other JSON readers."""
    try:
        text = json.dumps(unsealed(doc), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
    except (TypeError, ValueError) as e:
        # The NaN message gained a ": nan" suffix in Python 3.13; one wording for all.
        why = "a number is NaN or infinite" if str(e).startswith("Out of range float") else str(e)
        raise CertificateError(f"certificate is not plain JSON data: {why}") from None
    return text.encode("utf-8")


def document_digest(doc: dict) -> str:
    """sha256 hex of canonical_bytes(doc)."""
    return hashlib.sha256(canonical_bytes(doc)).hexdigest()


def utc_timestamp(seconds: float | None = None) -> str:
    """`2026-12-03T18:00:00Z`: the form the schema's `created` accepts (UTC, whole seconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if seconds is None else seconds))


def gate(name: str, passed: bool, threshold: str, measured: str, detail: str = "") -> dict:
    """One entry of `gates`."""
    if name not in GATE_NAMES:
        raise CertificateError(f"unknown certificate gate {name!r} (known: {', '.join(GATE_NAMES)})")
    return {"name": name, "passed": passed, "threshold": threshold, "measured": measured, "detail": detail}


_HEX_A = "a" * 64
_HEX_B = "b" * 64
_HEX_C = "c" * 64
_HEX_D = "d" * 64

_EXAMPLE: dict[str, Any] = {
    "schema_version": SCHEMA_VERSION,
    "created": "2026-12-03T18:00:00Z",
    "effctx_version": "0.1.0",
    "cell_key": _HEX_A,
    "cell": {
        "backend": "llama",
        "backend_version": "0.3.36",
        "device": "cpu",
        "profile": "exact",
        "profile_digest": _HEX_B,
        "kv_type_k": "f16",
        "kv_type_v": "f16",
        "policy": "keep-all",
        "model": {"name": "gemma-3-270m-it-Q4_K_M.gguf", "sha256": _HEX_C, "bytes": 253_000_000},
    },
    "hardware": {
        "machine_id": "0123456789abcdef",
        "cpu_model": "Example CPU",
        "cores": 2,
        "memory_bytes": 25_769_803_776,
        "accelerator": None,
    },
    "plan": {"quick": True, "lengths": [512, 1024], "depths": [0.1, 0.5, 0.9], "seeds": 2},
    "context": {"model": 32768, "memory": 123456, "allocated": 16384, "certified": 1024},
    "prompt_sizes": [512, 1024],
    "throughput": {
        "prompt_tokens": 512,
        "decode_tokens": 64,
        "engine": {"prefill_tps": 410.0, "decode_tps": 52.0},
        "raw": {"name": "llama-cpp-python loop", "prefill_tps": 415.0, "decode_tps": 53.0},
        "library": {"name": "llama-cpp-python create_completion", "prefill_tps": 405.0, "decode_tps": 51.5},
        "engine_raw": {"prefill": 0.988, "decode": 0.981},
        "engine_library": {"prefill": 1.012, "decode": 1.01},
    },
    "accounting": {"turns": 8, "agree": True, "detail": "reused and computed tokens match the tape on every turn"},
    "workloads": {
        "chat-8": {
            "digest": _HEX_D,
            "turns": 3,
            "ttft_ms": [120.5, 40.25, 38.0],
            "wall_ms": 2100.0,
            "control_wall_ms": 5200.0,
            "control": "full re-prefill every turn",
            "decode_tps": 52.0,
            "reused": 900,
            "computed": 300,
            "correct": 3,
            "questions": 3,
        },
    },
    "quality": {
        "passkey": {
            "by_length": [
                {"length": 512, "found": 6, "trials": 6, "ci_low": 0.61, "ci_high": 1.0, "needle_resident": 6},
                {"length": 1024, "found": 5, "trials": 6, "ci_low": 0.44, "ci_high": 0.97, "needle_resident": 6},
            ],
            "control": {"trials": 2, "false_keys": 0},
        },
        "nll": {
            "supported": True,
            "reason": "scored against the exact profile on the same tokens",
            "tokens": 512,
            "nll": 2.6,
            "reference_nll": 2.59,
            "delta": 0.01,
            "reference_profile": "exact",
        },
    },
    "gates": [
        {"name": "passkey", "passed": True, "threshold": "ci_low >= 0.4", "measured": "0.44 at 1024", "detail": ""},
        {"name": "nll", "passed": True, "threshold": "delta <= 0.05", "measured": "0.01", "detail": ""},
        {"name": "accounting", "passed": True, "threshold": "agree", "measured": "8 of 8 turns", "detail": ""},
        {"name": "throughput", "passed": True, "threshold": "engine/raw >= 0.9", "measured": "0.98", "detail": ""},
    ],
    "status": "certified",
    "failed_gate": None,
    "reason": "every gate passed up to 1024 tokens",
    "unsupported": ["state_snapshot"],
}


def example_document() -> dict:
    """A valid certificate (a fresh deep copy, without `digest`): a llama cell of the
    `exact` profile certified at 1024 tokens, with one workload and all four gates."""
    return copy.deepcopy(_EXAMPLE)
