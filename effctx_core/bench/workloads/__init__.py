"""Benchmark workloads: backend-neutral transcripts kept as TOML data files in this package."""

from effctx_core.bench.workloads.loader import load_workload, workload_names
from effctx_core.bench.workloads.records import Branch, Edit, Framing, Turn, Workload, WorkloadError

__all__ = ["Branch", "Edit", "Framing", "Turn", "Workload", "WorkloadError", "load_workload", "workload_names"]
