"""Task-family rows and grids as a certificate keeps them (quality.tasks)."""

from __future__ import annotations


def row(length: int, score: float, cold: float | None = 1000.0, warm: float | None = 100.0) -> dict:
    return {"length": length, "trials": 4, "score": score, "full": 0, "ci_low": 0.0, "ci_high": 1.0,
            "needles_resident": 4, "control_trials": 1, "made_up": 0, "cold_ttft_ms": cold, "warm_ttft_ms": warm}


def grid(*rows: dict, certified: int | None = None) -> dict:
    return {"by_length": list(rows), "prompt_tokens": 100, "prefilled": 60, "certified": certified}
