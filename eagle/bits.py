"""Bit-for-bit equality of results: the comparison behind "the same bits as one process".

A result is a plane, a cell, or a dict of them by output name.  Equal means the same names,
dtypes, shapes and raw bytes (so NaNs with equal bits compare equal, and -0.0 differs from 0.0).
"""
from __future__ import annotations

import numpy as np


def same_bits(a, b) -> bool:
    """Whether two results (arrays, scalars, or dicts of them) have the same bits."""
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(same_bits(a[k], b[k]) for k in a))
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def as_dict(plugin, result) -> dict:
    """A run's result as a dict by output name (a plan returns a single output bare)."""
    if isinstance(result, dict):
        return result
    return {plugin.outputs[0]: result}
