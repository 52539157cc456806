"""Reproducible random numbers for kernels: Philox4x32-10, a pure function of (seed, i, k).

Every draw is computed from its own coordinates -- the run's ``seed``, the sample index ``i`` and
the draw counter ``k`` within the sample -- and from nothing else: no state, no stream to
advance.  A draw therefore has the same bits whichever thread, partition, MPI rank or Dask worker
computes it (``docs/random.md``)::

    from eagle import random as erandom

    @eagle.kernel
    def walk(i, seed: Param, steps: Param, x: Out):
        s = 0.0
        for j in range(steps):
            s += erandom.normal(seed, i, j)      # the j-th normal draw of sample i
        x[i] = s

The generator is Philox4x32-10 (Salmon, Moraes, Dror & Shaw, "Parallel random numbers: as easy
as 1, 2, 3", SC'11), the counter-based generator of Random123 and curand.  A draw uses one block,
four 32-bit words ``w0 w1 w2 w3`` of

* key     ``(k0, k1) = (seed mod 2**32, seed >> 32)``, ``0 <= seed < 2**64``;
* counter ``(c0, c1, c2, c3) = (k, j, i mod 2**32, i >> 32)``, ``0 <= i < 2**64``,
  ``0 <= k < 2**32``; ``j`` numbers the blocks of one draw: 0, except for the rejection blocks
  of ``integers`` (1, 2, ...).

Every function is ``@numba.njit`` (no fastmath) and makes its bits with integer operations only
(64-bit products of 32-bit words split into hi and lo halves), so it runs from Python, inside a
kernel on the host, and under numba's CUDA target.  The functions are inlined into the kernel
that calls them.  A negative ``seed``, ``i`` or ``k``, or ``k >= 2**32``, raises ``ValueError``
from Python and on the host; device code does not report it.  A seed, index, counter or key
word that is not an integer (``k = 1.5``, a float array as a counter) is refused when the call
is compiled -- a ``TypingError`` naming the coordinate, from Python as inside a kernel --
never cast to the integer below it.  numba passes a Python int as an
int64 once a function has an int64 version, so give a seed or index of 2**63 or more as
``np.uint64(value)``.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba.core import types
from numba.core.errors import TypingError
from numba.extending import overload

__all__ = ["GENERATOR", "philox", "uniform", "uniform2", "uniform_range", "normal", "normal2",
           "exponential", "bernoulli", "integers"]

GENERATOR = "philox4x32-10"

_M0 = np.uint64(0xD2511F53)        # round multipliers
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint64(0x9E3779B9)        # Weyl key increments
_W1 = np.uint64(0xBB67AE85)
_MASK = np.uint64(0xFFFFFFFF)
_S11 = np.uint64(11)
_S21 = np.uint64(21)
_S32 = np.uint64(32)
_ZERO = np.uint64(0)
_ONE = np.uint64(1)
_TWO_M53 = 2.0 ** -53
_TWO_PI = 2.0 * math.pi

# inline="always": numba inlines the function into its caller (a kernel body), where a call
# would cost as much as the ten rounds.
_jit = numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")


@_jit
def _rounds(c0, c1, c2, c3, k0, k1):
    """Ten Philox rounds on words held in uint64 (each < 2**32)."""
    for _ in range(10):
        p0 = _M0 * c0
        p1 = _M1 * c2
        c0, c1, c2, c3 = (p1 >> _S32) ^ c1 ^ k0, p1 & _MASK, (p0 >> _S32) ^ c3 ^ k1, p0 & _MASK
        k0 = (k0 + _W0) & _MASK
        k1 = (k1 + _W1) & _MASK
    return c0, c1, c2, c3


def _words_of(t):
    """The numba types of the words a philox argument (or a draw coordinate) of type ``t`` holds."""
    if isinstance(t, types.BaseTuple):
        return list(t.types)
    if isinstance(t, (types.Array, types.List)):
        return [t.dtype]
    return [t]


def _refuse_non_integers(where, named):
    """Refuse, when the call is typed, any word that is not an integer: numba would cast a float
    (``k = 1.5`` drawing what ``k = 1`` draws) where Python's integer rule refuses it."""
    for what, t in named:
        bad = [w for w in _words_of(t) if not isinstance(w, types.Integer)]
        if bad:
            raise TypingError(f"{where}: the {what} ({t}) holds {bad[0]} where an integer goes; it would be "
                              "cast (1.5 drawing what 1 draws): pass integers (int, np.uint64, an integer array)")


def _integer_coords(seed, i, k):
    """Refuses non-integer coordinates when typed (``_integer_coords_typed``); nothing at run time."""
    raise NotImplementedError("eagle.random._integer_coords is only called from compiled code")


@overload(_integer_coords, target="generic", inline="always")
def _integer_coords_typed(seed, i, k):
    _refuse_non_integers("eagle.random", (("seed", seed), ("sample index i", i), ("draw counter k", k)))
    return lambda seed, i, k: None


@_jit
def _check(seed, i, k):
    _integer_coords(seed, i, k)
    if seed < 0:
        raise ValueError("eagle.random: seed must be an integer in [0, 2**64)")
    if i < 0:
        raise ValueError("eagle.random: the sample index i must be an integer in [0, 2**64)")
    if k < 0 or k > 0xFFFFFFFF:
        raise ValueError("eagle.random: the draw counter k must be an integer in [0, 2**32)")


@_jit
def _block(seed, i, k, j):
    """The four words of block ``j`` of draw ``(seed, i, k)``, as uint64 values < 2**32."""
    s = np.uint64(seed)
    n = np.uint64(i)
    return _rounds(np.uint64(k), np.uint64(j), n & _MASK, n >> _S32, s & _MASK, s >> _S32)


@_jit
def _unit(hi, lo):
    """53 bits -- all 32 of ``hi``, the top 21 of ``lo`` -- as a double in [0, 1)."""
    return np.float64(np.int64((hi << _S21) | (lo >> _S11))) * _TWO_M53


@_jit
def _word(x):
    return 0 <= x <= 0xFFFFFFFF


def _philox_words(args):
    """``(c0, c1, c2, c3, k0, k1)`` from philox's arguments (typed by ``_philox_words_typed``)."""
    raise NotImplementedError("eagle.random._philox_words is only called from compiled code")


@overload(_philox_words, target="generic", inline="always")
def _philox_words_typed(args):
    """Which form philox was called in, decided when it is typed: six words, or (counter, key)."""
    if len(args) == 6:
        _refuse_non_integers("eagle.random.philox", [(f"word {n}", t) for n, t in
                                                     zip(("c0", "c1", "c2", "c3", "k0", "k1"), args)])
        return lambda args: args
    if len(args) == 2:
        counter, key = args
        _refuse_non_integers("eagle.random.philox", (("counter", counter), ("key", key)))
        for what, t, want in (("counter", counter, 4), ("key", key, 2)):
            if isinstance(t, types.BaseTuple) and len(t) != want:
                raise TypingError(f"eagle.random.philox: the {what} is {want} words, got a tuple of {len(t)}")

        def impl(args):
            c, k = args
            if len(c) != 4 or len(k) != 2:
                raise ValueError("eagle.random.philox: the counter is 4 words and the key 2")
            return c[0], c[1], c[2], c[3], k[0], k[1]
        return impl
    raise TypingError("eagle.random.philox takes (c0, c1, c2, c3, k0, k1) or (counter, key): a 4-word counter "
                      f"and a 2-word key; got {len(args)} arguments")


@numba.njit(cache=True, nogil=True, error_model="numpy")
def philox(*args):
    """The Philox4x32-10 block of a counter and a key, each word an integer in [0, 2**32): four
    uint32 words, as Random123's ``philox4x32(ctr, key)``.  Called as ``philox(c0, c1, c2, c3,
    k0, k1)`` (in kernels) or ``philox(counter, key)`` with ``counter`` 4 words (a tuple or an
    array) and ``key`` 2; both forms give the same block."""
    c0, c1, c2, c3, k0, k1 = _philox_words(args)
    if not (_word(c0) and _word(c1) and _word(c2) and _word(c3) and _word(k0) and _word(k1)):
        raise ValueError("eagle.random.philox: every counter and key word is an integer in [0, 2**32)")
    w0, w1, w2, w3 = _rounds(np.uint64(c0), np.uint64(c1), np.uint64(c2), np.uint64(c3),
                             np.uint64(k0), np.uint64(k1))
    return np.uint32(w0), np.uint32(w1), np.uint32(w2), np.uint32(w3)


@_jit
def uniform(seed, i, k):
    """A double in [0, 1) with 53 random bits: ``((w0 << 21) | (w1 >> 11)) * 2**-53``."""
    _check(seed, i, k)
    w0, w1, _, _ = _block(seed, i, k, 0)
    return _unit(w0, w1)


@_jit
def uniform2(seed, i, k):
    """Two doubles in [0, 1) from one block: ``uniform(seed, i, k)`` and the same construction on
    ``(w2, w3)`` -- half the work per value of ``uniform``."""
    _check(seed, i, k)
    w0, w1, w2, w3 = _block(seed, i, k, 0)
    return _unit(w0, w1), _unit(w2, w3)


@_jit
def uniform_range(seed, i, k, lo, hi):
    """``lo + (hi - lo) * uniform(seed, i, k)``: in [lo, hi), except that rounding may give ``hi``."""
    return lo + (hi - lo) * uniform(seed, i, k)


@_jit
def normal2(seed, i, k):
    """Two independent standard normals from one block (Box-Muller): ``u1, u2 = uniform2(seed,
    i, k)``, ``r = sqrt(-2 log1p(-u1))``, ``(r cos(2 pi u2), r sin(2 pi u2))``."""
    u1, u2 = uniform2(seed, i, k)
    r = math.sqrt(-2.0 * math.log1p(-u1))
    t = _TWO_PI * u2
    return r * math.cos(t), r * math.sin(t)


@_jit
def normal(seed, i, k):
    """A standard normal: the first value of ``normal2(seed, i, k)``."""
    u1, u2 = uniform2(seed, i, k)
    return math.sqrt(-2.0 * math.log1p(-u1)) * math.cos(_TWO_PI * u2)


@_jit
def exponential(seed, i, k):
    """An exponential of rate 1: ``-log1p(-uniform(seed, i, k))`` (finite: u < 1)."""
    return -math.log1p(-uniform(seed, i, k))


@_jit
def bernoulli(seed, i, k, p):
    """True with probability ``p``: ``uniform(seed, i, k) < p``."""
    return uniform(seed, i, k) < p


@_jit
def _mul64(a, b):
    """The 128-bit product of two uint64 values as ``(hi, lo)``, from 32-bit halves."""
    a0, a1, b0, b1 = a & _MASK, a >> _S32, b & _MASK, b >> _S32
    ll, lh, hl, hh = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (ll >> _S32) + (lh & _MASK) + (hl & _MASK)
    return hh + (lh >> _S32) + (hl >> _S32) + (mid >> _S32), (mid << _S32) | (ll & _MASK)


@_jit
def integers(seed, i, k, low, high):
    """An int64 in [low, high), without modulo bias (``high - low`` up to 2**64 - 1).

    Lemire's multiply-shift: with ``r = high - low`` and a 64-bit word ``x``,
    ``(hi, lo) = x * r`` (128 bits); accept ``low + hi`` unless ``lo < 2**64 mod r``, which
    happens with probability below ``r / 2**64``.  The words tried, in order: ``(w0 << 32) | w1``
    and ``(w2 << 32) | w3`` of block 0, then of block 1, 2, ... of the same draw.
    """
    _check(seed, i, k)
    if high <= low:
        raise ValueError("eagle.random.integers: high must be greater than low")
    r = np.uint64(high) - np.uint64(low)
    j = _ZERO
    while True:
        w0, w1, w2, w3 = _block(seed, i, k, j)
        for x in ((w0 << _S32) | w1, (w2 << _S32) | w3):
            hi, lo = _mul64(x, r)
            if lo >= r or lo >= (_ZERO - r) % r:
                return np.int64(np.uint64(low) + hi)
        j += _ONE
