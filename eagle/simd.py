"""Host SIMD: the body rewritten tile-major, so that LLVM vectorises it across samples, same bits.

The laned body (``eagle.lanes``) interleaves a few samples as scalar code.  This transform runs a
*tile* of contiguous samples (``Options.tile``, 128 by default) instead, statement group by
statement group, each group as a loop over the tile's samples that LLVM's loop vectoriser turns
into packed instructions (``vmulpd``/``vaddpd`` on ``ymm``/``zmm`` registers).  Packed arithmetic
is element-wise: every sample performs exactly its own operations in its own order, so the bits
are those of one sample at a time.  No fastmath, no FMA contraction (unless
``@eagle.kernel(fma=True)``, which contracts alike in every body), no vector math library
(``NUMBA_DISABLE_INTEL_SVML``; this path is refused while numba uses SVML).

The (already rewritten, ``codegen.body_function``) body is cut, at uniform control flow (see
``eagle.analysis`` for what is uniform), into:

* *segments*: runs of per-sample statements (assignments, per-sample ``if``, per-sample ``for``,
  calls), each emitted as ``for s in range(n): ...`` with the sample's index ``i = b + s`` and its
  planes read through views of the tile (``x[i - po]`` becomes ``x_view[s]``);
* *uniform statements*, run once per tile; a uniform ``if`` stays one ``if`` around its parts;
* *hoisted loops*: a loop with a uniform header and no per-sample exit (``for _ in range(steps)``)
  runs outside, each of its iterations running its segments over the tile.  A hoisted ``for``
  whose body is one segment is unrolled ``Options.unroll`` times inside the sample loop, so the
  state stays in registers between steps (a loop over a small literal range stays inside its
  segment, where LLVM unrolls it);
* *masked loops*: a ``while`` on per-sample values runs in lockstep rounds over the tile; each
  sample has an active flag, runs its own test and body while active (``break`` clears the flag,
  ``continue`` ends its round, ``else`` runs when its test fails), and the rounds end when no
  sample is active.  A sample's loads and stores are unconditional, so the round vectorises with
  selects (or masked stores for planes and cells); side effects are never reordered within a sample.

A per-sample local that lives from one segment to another (``state``) is kept in a tile array
(one element per sample).  Its dtype is the type numba gives that local at each place it is read
in the one-at-a-time body: a *witness* -- the body with those values captured, never run, only
typed -- supplies it, so an ``int`` accumulator that becomes a ``float`` at a loop's head is
stored as numba would cast it there; a local whose type differs between two such places falls
back (``same_type``).  Cells are written into a tile buffer and folded row by row by
``eagle.rows.row_loop_lines`` exactly as before.

512-bit vectors: LLVM prefers 256-bit vectors on CPUs that have AVX-512 ("prefer-256-bit"); the
generated functions ask for 512 through their own LLVM function attribute (``wide``), so nothing
changes for any other numba code in the process.

``choose`` says whether a plugin takes this path, or why not: kernels that write other samples
(sample order), raise (the loop records the sample it is at), use a construct the lane transform
refuses, or keep a per-sample array across a hoisted loop fall back to the laned loop, as does a
body whose vectorised loop does not compile (``eagle.host.HostEntry``).  ``EAGLE_HOST_SIMD=0``
turns the path off; ``EAGLE_HOST_LANES`` (a forced lane count) does too.
"""
from __future__ import annotations

import os
from typing import NamedTuple

from .analysis import Refused, fallback_reason
from .lanes import ENV as LANES_ENV
from .rows import ROW
from .simd_emit import ALIASES, LEN, MIN, RANGE, Built, TileEmitter
from .simd_runtime import refusal

ENV = "EAGLE_HOST_SIMD"                 # 0: the laned loop; 1 (default): the vectorised loop
VECTOR_ENV = "EAGLE_HOST_VECTOR"        # 256 or 512: the vector width asked of LLVM
TILES = (32, 64, 128, 256, 512)         # tile widths: whole rows, so a tile never splits a row
TILE = 128
assert all(t % ROW == 0 for t in TILES + (TILE,))
UNROLL = 4


class Options(NamedTuple):
    """How the vectorised loop is built: samples per tile, vector bits (0: eagle chooses), unroll
    of hoisted loops."""
    tile: int = TILE
    vector: int = 0
    unroll: int = UNROLL


def host_has_avx512() -> bool:
    import llvmlite.binding as ll
    try:
        return "+avx512f" in ll.get_host_cpu_features().flatten().split(",")
    except Exception:  # noqa: BLE001 - no feature list: assume the LLVM default width
        return False


def default_options() -> Options:
    """``EAGLE_HOST_VECTOR`` (256 or 512) forces the vector width; else eagle chooses per kernel:
    512 bits where the CPU has AVX-512, except for a body with a masked loop, whose rounds ran
    faster at 256 (benchmarks/simd.py)."""
    text = os.environ.get(VECTOR_ENV)
    if text:
        if text not in ("256", "512"):
            raise ValueError(f"{VECTOR_ENV}={text!r}: the vector width is 256 or 512 bits")
        return Options(vector=int(text))
    return Options()


def check_options(opts: Options) -> Options:
    if opts.tile not in TILES:
        raise ValueError(f"tile={opts.tile!r}: one of {', '.join(map(str, TILES))} samples")
    if opts.vector not in (0, 256, 512):
        raise ValueError(f"vector={opts.vector!r}: 256 or 512 bits (0: eagle chooses)")
    if not (isinstance(opts.unroll, int) and 1 <= opts.unroll <= 16):
        raise ValueError(f"unroll={opts.unroll!r}: 1 to 16")
    return opts


def choose(plugin, lanes=None, want=None):
    """``(options, None)`` when the plugin's host entry runs the vectorised loop, else
    ``(None, reason)``.  ``lanes`` is a lane count asked for (then the laned loop runs);
    ``want``: None (eagle chooses, ``EAGLE_HOST_SIMD``), False (never) or ``Options``."""
    if want is False:
        return None, "the laned loop was asked for"
    if lanes is not None:
        return None, f"a lane count was asked for (lanes={lanes})"
    if want is None:
        env = os.environ.get(ENV, "1")
        if env not in ("0", "1"):
            raise ValueError(f"{ENV}={env!r}: 1 runs the vectorised host loop, 0 the laned one")
        if env == "0":
            return None, f"the vectorised loop is off ({ENV}=0)"
        if os.environ.get(LANES_ENV):
            return None, f"{LANES_ENV} forces the laned loop"
        want = default_options()
    opts = check_options(Options(*want))
    reason = fallback_reason(plugin)
    if reason:
        return None, reason
    import numba
    if getattr(numba.config, "USING_SVML", False):
        return None, "numba uses Intel SVML, whose vector math gives position-dependent bits"
    try:
        TileEmitter(plugin, opts)
    except Refused as e:
        return None, str(e)
    return opts, None


def build(plugin, opts: Options) -> Built:
    """The vectorised function of ``plugin`` (``eagle.simd_emit``)."""
    return TileEmitter(plugin, check_options(opts)).built(host_has_avx512())


__all__ = ["ENV", "VECTOR_ENV", "Options", "TILE", "TILES", "UNROLL", "Built", "build", "choose",
           "default_options", "host_has_avx512", "refusal", "ALIASES", "RANGE", "LEN", "MIN"]
