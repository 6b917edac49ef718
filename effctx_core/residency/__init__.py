"""Residency: which blocks of the token tape the backend really holds, and why."""

from .blocks import Block, BlockClass, BlockFlag, BlockTable, Reason, Segment
from .report import MODELED, OBSERVED, ResidencyReport

__all__ = [
    "Block", "BlockClass", "BlockFlag", "BlockTable", "Reason", "Segment",
    "MODELED", "OBSERVED", "ResidencyReport",
]
