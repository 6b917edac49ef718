"""`effctx bench run WORKLOAD`: a workload through the engine, beside the raw control.

Each turn runs twice in one process, alternating: through effctx's engine, then the way
a user would run it without effctx (`Baseline.control`: llama-cpp-python's
`create_completion`, openvino-genai's pipeline with its prefix cache; or, for any
llama.cpp profile, a llama-server of effctx's build), on the same token ids, same
settings and threads. The control keeps what its library keeps between calls
and nothing else, so every ratio is effctx end-to-end against what a user would
otherwise run.

The turns of a workload, by kind:
- cold: the stable prefix and the first message on an empty cache;
- suffix: a later message: the conversation so far is reused, the message is computed;
- edit: the stable prefix changed by one word; everything from the change is computed;
- branch: back to an earlier turn (effctx restores its snapshot) and on differently;
- second-process: the first turn again in a new process, where effctx's persistent
  prefix cache holds the prefix and the library holds nothing.
"""

from effctx_core.bench.workload_run.control import CONTROL_BACKENDS, control_baseline
from effctx_core.bench.workload_run.records import SLOWER_TOLERANCE, ControlTurn, TurnRun, WorkloadReport
from effctx_core.bench.workload_run.runner import ProgressFn, run_workload, workload_steps

__all__ = [
    "CONTROL_BACKENDS", "SLOWER_TOLERANCE", "ControlTurn", "ProgressFn", "TurnRun", "WorkloadReport",
    "control_baseline", "run_workload", "workload_steps",
]
