"""Residency: which blocks of the token tape the backend really holds, and why."""

from effctx_core.residency.blocks import Block, BlockClass, BlockFlag, BlockTable, Reason, Segment
from effctx_core.residency.report import MODELED, OBSERVED, ResidencyReport

__all__ = [
    "Block", "BlockClass", "BlockFlag", "BlockTable", "Reason", "Segment",
    "MODELED", "OBSERVED", "ResidencyReport",
]
