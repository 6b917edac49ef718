"""Every task family, by name."""

from __future__ import annotations

from effctx_core.bench.tasks.aggregation import AGGREGATION
from effctx_core.bench.tasks.base import TaskFamily
from effctx_core.bench.tasks.multikey import MULTIKEY, MULTIKEY_TEXT
from effctx_core.bench.tasks.multivalue import MULTIVALUE
from effctx_core.bench.tasks.passkey import PASSKEY
from effctx_core.bench.tasks.vartrack import VARTRACK

FAMILIES: dict[str, TaskFamily] = {
    family.name: family for family in (PASSKEY, MULTIKEY, MULTIKEY_TEXT, MULTIVALUE, VARTRACK, AGGREGATION)
}
