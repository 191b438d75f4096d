"""Moved to :mod:`subspaces.losses.simkgc`; this name stays for imports written before the move."""

from subspaces.losses.simkgc import MASKED, SimKGCLoss, false_negative_mask, self_negative_mask

__all__ = ["MASKED", "SimKGCLoss", "false_negative_mask", "self_negative_mask"]
