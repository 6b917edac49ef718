"""A certification plan small enough for a test."""

from __future__ import annotations

from pathlib import Path

from effctx_core.certify.plan import CertifyPlan


def tiny_plan(workload: Path) -> CertifyPlan:
    # Other load on a test machine moves engine/raw by more than the real gate allows, so
    # the gate here only asks for a figure; test_quality_gates tests the gate itself.
    # One task family beside the passkey, at one depth: its stage, grid and the effective
    # context are made as the full plan makes them.
    return CertifyPlan(quick=True, lengths=(512,), depths=(0.5,), seeds=1, nll_chars=600, prompt_tokens=256,
                       decode_tokens=16, rounds=2, workloads=(str(workload),), control=False, throughput_min_ratio=0.0,
                       families=("multikey",), task_depths=(0.5,))
