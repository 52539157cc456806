"""Which host loop runs a kernel: the vectorised one, the laned one, or one sample at a time.

The policy, in one place: ``decide`` picks the path when an entry is built (``eagle.simd.choose``,
then ``eagle.lanes.choose``), and when the chosen loop does not compile for a run's arguments
while one sample at a time does, ``without_simd`` and ``without_lanes`` say where the entry falls
back to, and why.  ``eagle.host.HostEntry`` is the mechanism: it builds, compiles and runs what a
``Path`` names.
"""
from __future__ import annotations

from typing import NamedTuple

from .lanes import choose as lanes_choose
from .simd import Options, choose as simd_choose, refusal


class Path(NamedTuple):
    """What a host entry runs.  ``simd``: the vectorised loop's options (None: not taken, for
    ``simd_reason``); ``lanes``: samples in lockstep in the laned loop (1: one at a time, for
    ``lanes_reason``; unused when ``simd`` is set)."""
    simd: Options | None
    simd_reason: str | None
    lanes: int
    lanes_reason: str | None

    @property
    def name(self) -> str:
        """``"simd"``, ``"lanes"`` or ``"one"``."""
        return "simd" if self.simd is not None else "lanes" if self.lanes > 1 else "one"


def decide(plugin, lanes: int | None = None, simd=None) -> Path:
    """The path of a new entry: ``lanes`` a lane count asked for (None: eagle chooses,
    ``EAGLE_HOST_LANES``), ``simd`` None (eagle chooses, ``EAGLE_HOST_SIMD``), False or Options."""
    opts, simd_reason = simd_choose(plugin, lanes, simd)
    if opts is not None:
        return Path(opts, None, 1, None)
    n, lanes_reason = lanes_choose(plugin, lanes)
    return Path(None, simd_reason, n, lanes_reason)


def without_simd(plugin, failed) -> Path:
    """The path after the vectorised loop did not compile (numba's error ``failed``)."""
    n, lanes_reason = lanes_choose(plugin)
    return Path(None, refusal(failed), n, lanes_reason)


def without_lanes(path: Path, failed) -> Path:
    """The path after the laned body did not compile: one sample at a time."""
    return path._replace(simd=None, lanes=1,
                         lanes_reason=f"the laned body did not compile ({type(failed).__name__})")
