"""The backend-neutral session contract: the records it passes (records.py), the session
and executor protocols (session.py), the backend protocol (backend.py) and the baseline
protocol (baseline.py); the errors are in errors.py.

Every backend implements `Backend` and `Session`; the engine, the CLI and the console only
ever see these types. The names are re-exported here, so `from effctx_core.contract
import X` reads any of them.
"""

from effctx_core.contract.backend import Backend
from effctx_core.contract.baseline import Baseline, BaselineRun
from effctx_core.contract.records import (
    MAX_TOP_LOGPROBS,
    MODELED,
    OBSERVED,
    Capabilities,
    Capability,
    CapacityReport,
    CapacityRow,
    ContextLimit,
    ContextReport,
    DecodeConfig,
    DeviceShare,
    ModelFacts,
    ModelInfo,
    PrefillProgress,
    PrefixCause,
    PrefixStatus,
    RangeAction,
    ResidencyMap,
    RuntimeCounts,
    RuntimeEviction,
    ScoredSuffix,
    SessionSnapshot,
    StateCosts,
    SuffixStatus,
    TokenChunk,
    describe_prefix,
)
from effctx_core.contract.session import ProgressSink, ResidencyExecutor, Session

__all__ = [
    "MAX_TOP_LOGPROBS", "MODELED", "OBSERVED", "Backend", "Baseline", "BaselineRun", "CapacityReport", "CapacityRow", "Capabilities", "Capability", "ContextLimit", "ContextReport",
    "DecodeConfig", "DeviceShare", "ModelFacts", "ModelInfo", "PrefillProgress", "PrefixCause", "PrefixStatus",
    "ProgressSink", "RangeAction", "ResidencyExecutor", "ResidencyMap", "RuntimeCounts", "RuntimeEviction", "ScoredSuffix",
    "Session", "SessionSnapshot", "StateCosts", "SuffixStatus", "TokenChunk", "describe_prefix",
]
