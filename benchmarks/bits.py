"""Bit-for-bit comparison of results against the one-process reference.

A result is a dict by output name (planes as arrays, cells as float64 scalars).  Equal means the
same names, shapes, dtypes and raw bytes (so NaNs with equal bits compare equal): ``same_bits``
and ``as_dict`` are ``eagle.bits``' own; this module adds how far apart results are and digests.
"""
from __future__ import annotations

import hashlib

import numpy as np

from eagle.bits import as_dict, same_bits  # noqa: F401 - the one comparison, used here and by the arms


def ulps(a, b) -> float:
    """How far apart two float64 values are, in units of the last place of ``b``."""
    a, b = float(a), float(b)
    if a == b:
        return 0.0
    return abs(a - b) / float(np.spacing(abs(b)) or np.finfo(float).tiny)


def compare(result: dict, reference: dict) -> tuple[str, str]:
    """``("yes" | "no", detail)``: whether every output has the reference's bits, and what differs."""
    if result.keys() != reference.keys():
        return "no", f"outputs {sorted(result)} != {sorted(reference)}"
    differ = []
    for name in reference:
        a, b = np.asarray(result[name]), np.asarray(reference[name])
        if same_bits(a, b):
            continue
        if a.ndim == 0 and b.ndim == 0:
            differ.append(f"{name} off by {ulps(a, b):.3g} ulp")
        elif a.shape == b.shape:
            both_nan = np.isnan(a) & np.isnan(b) if a.dtype.kind == "f" else False
            bad = int(np.count_nonzero(~((a == b) | both_nan)))
            differ.append(f"{name}: {bad} samples differ" if bad else f"{name}: same values, other bits")
        else:
            differ.append(f"{name}: shape {a.shape} != {b.shape}")
    if not differ:
        return "yes", ""
    return "no", "; ".join(differ)


def digest(result: dict) -> str:
    """A hash of a result's names, dtypes, shapes and bytes (for results that stay in another process)."""
    h = hashlib.sha256()
    for name in sorted(result):
        a = np.ascontiguousarray(np.asarray(result[name]))
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()
