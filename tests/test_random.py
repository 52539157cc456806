"""eagle.random: Philox4x32-10 against its published answers and independent implementations,
the statistics of every draw, and the same bits inside kernels on every structure.

* known answers from the Random123 distribution; randomgen's Philox (a test dependency) and a
  plain-Python Philox written here from the paper's definition as independent implementations;
* statistics of 10^6 draws with fixed seeds: the bounds are 5 standard errors (KS: p = 0.001);
* kernels: HostTeam at 1-3 threads and 1-7 partitions, Dask workers, MPI ranks and the CUDA
  simulator, each equal bit for bit to a plain loop calling the functions per sample.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numba
import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import Cell, Out, Param
from eagle import plan as eplan
from eagle import random as erandom
from eagle.host import HostEntry
from tests.reference import cell, per_sample, row_partials

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
M32 = 0xFFFFFFFF
U64 = np.uint64
BIG = 2**64 - 1


# -- the generator -------------------------------------------------------------------------------

# Known answers: DEShawResearch/random123, tests/kat_vectors lines 27-29 (zeros, all ones, digits
# of pi), and tests/old_kat_vectors lines 98 and 121 (a counter or key word set).
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M32,) * 4, (M32, M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
    ((1, 0, 0, 0), (1, 0), (0xAC08141B, 0xDFC5CCBE, 0x79C07A47, 0xA7F66093)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0, 1),
     (0x126514C3, 0xD1898B69, 0xDA2707B3, 0x6E6FB436)),
]


def ref_philox(ctr, key):
    """Philox4x32-10 from the definition in Salmon et al. (SC'11), in plain Python."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def ref_words(seed, i, k, j=0):
    """The block of draw (seed, i, k), by the documented mapping."""
    return ref_philox((k, j, i & M32, i >> 32), (seed & M32, seed >> 32))


def ref_unit(hi, lo):
    return ((hi << 21) | (lo >> 11)) * 2.0**-53


def ref_integers(seed, i, k, low, high, block=False):
    """Lemire's method as documented; with ``block``, also the block the value came from."""
    r = (high - low) % 2**64
    j = 0
    while True:
        w = ref_words(seed, i, k, j)
        for x in ((w[0] << 32) | w[1], (w[2] << 32) | w[3]):
            if (x * r) % 2**64 >= 2**64 % r:
                return (low + (x * r >> 64), j) if block else low + (x * r >> 64)
        j += 1


@pytest.mark.parametrize("ctr, key, expected", KAT)
def test_known_answers(ctr, key, expected):
    assert erandom.philox(*ctr, *key) == expected
    assert ref_philox(ctr, key) == expected
    assert erandom.GENERATOR == "philox4x32-10"


def test_against_randomgen():
    """randomgen's Philox(number=4, width=32) advances its counter once before the first block."""
    randomgen = pytest.importorskip("randomgen")
    rng = np.random.default_rng(20240601)
    cases = [(0, 0), (2**128 - 2, BIG)] + [(int(a) << 64 | int(b), int(c))
                                           for a, b, c in rng.integers(0, 2**63, (50, 3))]
    for counter, key in cases:
        raw = randomgen.Philox(counter=counter, key=key, number=4, width=32).random_raw(8)
        ours = []
        for step in (1, 2):
            c = (counter + step) % 2**128
            ours += erandom.philox(*[(c >> 32 * t) & M32 for t in range(4)], key & M32, key >> 32)
        assert [int(w) for w in raw] == ours, (counter, key)


COORDS = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1), (12345, 678, 9), (2**32, 2**32, 7),
          (BIG, BIG, M32), (2**63, 2**63 + 5, 2**31)]


@pytest.mark.parametrize("seed, i, k", COORDS)
def test_draws_follow_their_construction(seed, i, k):
    """Every draw is the documented function of the block's words (the host uses the C
    library's log1p, cos and sin, as Python's math does)."""
    w = ref_words(seed, i, k)
    s, n = U64(seed), U64(i)
    u1, u2 = ref_unit(w[0], w[1]), ref_unit(w[2], w[3])
    assert erandom.uniform(s, n, k) == u1
    assert erandom.uniform2(s, n, k) == (u1, u2)
    r, t = math.sqrt(-2.0 * math.log1p(-u1)), 2.0 * math.pi * u2
    assert erandom.normal2(s, n, k) == (r * math.cos(t), r * math.sin(t))
    assert erandom.normal(s, n, k) == r * math.cos(t)
    assert erandom.exponential(s, n, k) == -math.log1p(-u1)
    assert erandom.uniform_range(s, n, k, -2.0, 3.0) == -2.0 + 5.0 * u1
    assert erandom.bernoulli(s, n, k, 0.5) == (u1 < 0.5)
    for low, high in [(0, 10), (-7, 1), (5, 6), (-2**63, 2**63 - 1), (-2**62, 2**62 + 1)]:
        assert erandom.integers(s, n, k, low, high) == ref_integers(seed, i, k, low, high)


def test_integers_rejection_blocks():
    """r = 2**63 + 1 rejects about half the words: blocks 1, 2, ... of a draw are reached."""
    low, high = -2**62, 2**62 + 1
    want = [ref_integers(3, 0, k, low, high, block=True) for k in range(400)]
    assert [erandom.integers(3, 0, k, low, high) for k in range(400)] == [v for v, _ in want]
    assert max(j for _, j in want) >= 2


@pytest.mark.parametrize("args, what", [
    ((-1, 0, 0), "seed"), ((0, -1, 0), "sample index"), ((0, 0, -1), "draw counter"),
    ((0, 0, 2**32), "draw counter")])
def test_out_of_range_coordinates_are_refused(args, what):
    for fn in (erandom.uniform, erandom.normal, erandom.exponential, erandom.uniform2, erandom.normal2):
        with pytest.raises(ValueError, match=what):
            fn(*args)
    with pytest.raises(ValueError, match=what):
        erandom.integers(*args, 0, 5)


def test_refusals_of_philox_words_and_empty_ranges():
    with pytest.raises(ValueError, match="counter and key word"):
        erandom.philox(0, 0, 0, 2**32, 0, 0)
    with pytest.raises(ValueError, match="counter and key word"):
        erandom.philox(0, 0, 0, 0, -1, 0)
    for low, high in [(5, 5), (5, 4)]:
        with pytest.raises(ValueError, match="high must be greater than low"):
            erandom.integers(1, 2, 3, low, high)


# -- statistics ------------------------------------------------------------------------------------

@numba.njit
def grid(which, seed, n, m, a, b):
    """Draws (sample i, counter k) for i < n, k < m of one function."""
    out = np.empty((n, m))
    for i in range(n):
        for k in range(m):
            if which == 0:
                v = erandom.uniform(seed, i, k)
            elif which == 1:
                v = erandom.normal(seed, i, k)
            elif which == 2:
                v = erandom.normal2(seed, i, k)[1]
            elif which == 3:
                v = erandom.exponential(seed, i, k)
            elif which == 4:
                v = erandom.uniform2(seed, i, k)[1]
            else:
                v = 1.0 if erandom.bernoulli(seed, i, k, a) else 0.0
            out[i, k] = v
    return out


@numba.njit
def int_grid(seed, n, m, low, high):
    out = np.empty((n, m), dtype=np.int64)
    for i in range(n):
        for k in range(m):
            out[i, k] = erandom.integers(seed, i, k, low, high)
    return out


@numba.njit
def normal_cdf(x):
    out = np.empty_like(x)
    for t in range(x.size):
        out[t] = 0.5 * math.erfc(-x[t] / math.sqrt(2.0))
    return out


def ks(sample, cdf):
    """Kolmogorov-Smirnov distance of ``sample`` from ``cdf``."""
    f = cdf(np.sort(sample.ravel()))
    n = f.size
    return max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n))


N, M = 1000, 1000                          # 10^6 draws: 1000 samples x 1000 counters
KS_BOUND = 1.95 / math.sqrt(N * M)         # p = 0.001
Z = 5.0                                    # standard errors


def near(value, expected, se):
    assert abs(value - expected) < Z * se, (value, expected, se)


@pytest.mark.parametrize("which", [0, 4])
def test_uniform_statistics(which):
    u = grid(which, 2024, N, M, 0.0, 0.0)
    n = u.size
    assert u.min() >= 0.0 and u.max() < 1.0
    near(u.mean(), 0.5, math.sqrt(1 / 12 / n))
    near(u.var(), 1 / 12, math.sqrt(1 / 180 / n))
    assert ks(u, lambda x: x) < KS_BOUND
    assert np.unique(u).size == n                # 53 bits: a repeat in 10^6 has odds ~1e-4
    low = np.mean(u < 2.0**-10)                  # the low bits are random too
    near(low, 2.0**-10, math.sqrt(2.0**-10 / n))


@pytest.mark.parametrize("which", [1, 2])
def test_normal_statistics(which):
    z = grid(which, 7, N, M, 0.0, 0.0).ravel()
    n = z.size
    near(z.mean(), 0.0, 1 / math.sqrt(n))
    near(z.var(), 1.0, math.sqrt(2 / n))
    near(np.mean(z**3), 0.0, math.sqrt(15 / n))
    near(np.mean(z**4), 3.0, math.sqrt(96 / n))
    p3 = math.erfc(3 / math.sqrt(2))             # P(|z| > 3)
    near(np.mean(np.abs(z) > 3.0), p3, math.sqrt(p3 * (1 - p3) / n))
    assert ks(z, normal_cdf) < KS_BOUND
    assert np.abs(z).max() < math.sqrt(-2 * math.log(2.0**-53))


def test_normal2_halves_are_uncorrelated():
    a, b = grid(1, 11, N, M, 0, 0).ravel(), grid(2, 11, N, M, 0, 0).ravel()
    assert abs(np.corrcoef(a, b)[0, 1]) < Z / math.sqrt(a.size)
    assert abs(np.corrcoef(a**2, b**2)[0, 1]) < Z / math.sqrt(a.size)


def test_exponential_statistics():
    x = grid(3, 99, N, M, 0.0, 0.0)
    n = x.size
    assert x.min() >= 0.0 and np.isfinite(x).all()
    near(x.mean(), 1.0, 1 / math.sqrt(n))
    near(x.var(), 1.0, math.sqrt(8 / n))
    near(np.mean(x > 5.0), math.exp(-5), math.sqrt(math.exp(-5) / n))
    assert ks(x, lambda v: -np.expm1(-v)) < KS_BOUND


def chi2_ok(counts):
    expected = counts.sum() / counts.size
    stat = ((counts - expected) ** 2 / expected).sum()
    df = counts.size - 1
    return stat < df + Z * math.sqrt(2 * df)


@pytest.mark.parametrize("low, high", [(0, 10), (-3, 4), (10**9, 10**9 + 97), (0, 2**32 + 3)])
def test_integers_uniform(low, high):
    x = int_grid(5, N, M, low, high)
    width = high - low
    assert x.min() >= low and x.max() < high
    if width < 1000:
        assert x.min() == low and x.max() == high - 1
    counts = np.bincount(x.ravel() - low) if width < 1000 else np.bincount((x.ravel() - low) * 64 // width)
    assert chi2_ok(counts)


def test_integers_edges():
    assert (int_grid(1, 20, 20, 41, 42) == 41).all()
    full = int_grid(1, 300, 300, -2**63, 2**63 - 1).ravel()
    assert chi2_ok(np.bincount((full.view(np.uint64) >> np.uint64(58)).astype(np.int64), minlength=64))
    assert (full < 0).any() and (full > 0).any()
    skew = int_grid(1, 300, 300, -2**62, 2**62 + 1).ravel()     # half the words rejected
    assert skew.min() >= -2**62 and skew.max() <= 2**62
    assert chi2_ok(np.bincount(skew // 2**57 + 32, minlength=64)[:64])


def test_bernoulli():
    for p in (0.0, 0.3, 1.0):
        x = grid(5, 3, 300, 300, p, 0.0)
        near(x.mean(), p, max(math.sqrt(p * (1 - p) / x.size), 1e-12))


def test_independence_of_neighbours():
    """Correlation between neighbouring counters, samples, seeds (and high key and counter words)."""
    bound = Z / math.sqrt(N * M)
    for which in (0, 1):
        g = grid(which, 123, N + 1, M + 1, 0.0, 0.0)
        pairs = {"counter": (g[:N, :M], g[:N, 1:]), "sample": (g[:N, :M], g[1:, :M]),
                 "seed": (g[:N, :M], grid(which, 124, N, M, 0.0, 0.0)),
                 "seed + 2**32": (g[:N, :M], grid(which, 123 + 2**32, N, M, 0.0, 0.0))}
        for what, (a, b) in pairs.items():
            r = np.corrcoef(a.ravel(), b.ravel())[0, 1]
            assert abs(r) < bound, (which, what, r)
    far = np.array([erandom.uniform(1, i, 0) for i in range(2000)])
    high = np.array([erandom.uniform(1, i + 2**32, 0) for i in range(2000)])
    assert abs(np.corrcoef(far, high)[0, 1]) < Z / math.sqrt(2000)


# -- inside kernels ----------------------------------------------------------------------------------

@eagle.kernel
def draws(i, seed: Param, d: Out[4], total: Cell["sum"]):
    d[i, 0] = erandom.uniform(seed, i, 0)
    d[i, 1] = erandom.normal(seed, i, 1)
    d[i, 2] = erandom.exponential(seed, i, 2)
    d[i, 3] = erandom.integers(seed, i, 3, -50, 50)
    total[i] = erandom.uniform(seed, i, 4)


@eagle.kernel
def uniforms(i, seed: Param, m: Param, u: Out):
    s = 0.0
    for k in range(m):
        s += erandom.uniform(seed, i, k)
    u[i] = s


@eagle.kernel
def gbm_call(i, seed: Param, s0: Param, strike: Param, r: Param, sigma: Param, t: Param, steps: Param,
             payoff: Out, total: Cell["sum"]):
    dt = t / steps
    s = s0
    for j in range(steps):
        z = erandom.normal(seed, i, j)          # the j-th normal draw of sample i under seed
        s = s * math.exp((r - 0.5 * sigma * sigma) * dt + sigma * math.sqrt(dt) * z)
    p = max(s - strike, 0.0) * math.exp(-r * t)
    payoff[i] = p
    total[i] = p


def reference(seed, n):
    """``draws`` by a plain loop over samples, calling the functions from Python."""
    d = np.empty((n, 4))
    contributions = []
    for i in range(n):
        d[i] = (erandom.uniform(seed, i, 0), erandom.normal(seed, i, 1), erandom.exponential(seed, i, 2),
                erandom.integers(seed, i, 3, -50, 50))
        contributions.append(erandom.uniform(seed, i, 4))
    return d, contributions


def bits(x):
    return np.ascontiguousarray(x, dtype=np.float64).view(np.uint64)


@pytest.mark.parametrize("seed", [0, 2024, U64(BIG)])
def test_kernel_same_bits_at_every_split(team, seed):
    plugin = eagle.deploy(draws)
    for n in (0, 1, 31, 33, 1001):
        d_ref, contributions = reference(seed, n)
        total = np.float64(cell("sum", contributions))          # tests.reference's fold, not eagle's
        for threads in (1, 2, 3):
            team(threads)
            for parts in (1, 2, 3, 7):
                out = eplan.plan(plugin, structure=eexec.HostTeam, npartitions=parts).run(
                    d=np.zeros((n, 4)), seed=seed)
                assert np.array_equal(bits(out["d"]), bits(d_ref)), (n, threads, parts)
                assert bits(out["total"]) == bits(total), (n, threads, parts)
        exact = math.fsum(contributions)
        assert abs(total - exact) <= 2 * math.ulp(exact) + 1e-300


def test_a_python_int_seed_up_to_2_64_is_a_param(team):
    """run(seed=2**64 - 1) as a plain Python int: the same draws as np.uint64 from Python."""
    plugin = eagle.deploy(draws)
    top = 2 ** 64 - 1
    d_ref, _ = reference(np.uint64(top), 5)
    out = eplan.plan(plugin, structure=eexec.HostTeam).run(d=np.zeros((5, 4)), seed=top)
    assert np.array_equal(bits(out["d"]), bits(d_ref))
    with pytest.raises(OverflowError, match=r"Param 'seed' of kernel 'draws' is 18446744073709551616"):
        eplan.plan(plugin, structure=eexec.HostTeam).run(d=np.zeros((5, 4)), seed=2 ** 64)


def test_uniform_loop_in_a_kernel(team):
    n, m = 257, 40
    want = np.array([sum(erandom.uniform(9, i, k) for k in range(m)) for i in range(n)])
    for threads in (1, 3):
        team(threads)
        got = eplan.plan(eagle.deploy(uniforms), structure=eexec.HostTeam, npartitions=2).run(
            u=np.zeros(n), seed=9, m=m)
        assert np.array_equal(bits(got), bits(want))


def black_scholes(s0, strike, r, sigma, t):
    cdf = lambda x: 0.5 * math.erfc(-x / math.sqrt(2.0))  # noqa: E731
    d1 = (math.log(s0 / strike) + (r + 0.5 * sigma**2) * t) / (sigma * math.sqrt(t))
    return s0 * cdf(d1) - strike * math.exp(-r * t) * cdf(d1 - sigma * math.sqrt(t))


GBM = dict(s0=100.0, strike=105.0, r=0.03, sigma=0.2, t=1.0, steps=16)


def test_gbm_call_against_black_scholes(team):
    n = 100_000
    out = eplan.plan(eagle.deploy(gbm_call), structure=eexec.HostTeam).run(payoff=np.zeros(n), seed=1, **GBM)
    p = out["payoff"]
    se = p.std(ddof=1) / math.sqrt(n)
    exact = black_scholes(GBM["s0"], GBM["strike"], GBM["r"], GBM["sigma"], GBM["t"])
    assert abs(out["total"] / n - exact) < 4 * se, (out["total"] / n, exact, se)
    assert bits(out["total"]) == bits(np.float64(cell("sum", p)))   # the payoffs folded by tests.reference
    team(2)
    again = eplan.plan(eagle.deploy(gbm_call), structure=eexec.HostTeam, npartitions=3).run(
        payoff=np.zeros(n), seed=1, **GBM)
    assert np.array_equal(bits(again["payoff"]), bits(p)) and bits(again["total"]) == bits(out["total"])


DRAWING = {
    "draws": (draws, lambda n: {"seed": 2024, "d": np.zeros((n, 4))}),
    "uniforms": (uniforms, lambda n: {"seed": 9, "m": 7, "u": np.zeros(n)}),
    "gbm_call": (gbm_call, lambda n: {"seed": 1, "payoff": np.zeros(n), **GBM}),
}


@pytest.mark.parametrize("name", list(DRAWING))
def test_kernels_drawing_from_eagle_random_vectorise(name):
    """Draws are pure functions of (seed, i, k), so these kernels take the vectorised host loop;
    the vectorised, the laned and the one-at-a-time loops (each asked for, and checked to be the
    one that ran) each give the bits of the kernel run in Python, cells' row partials included."""
    kernel, planes = DRAWING[name]
    plugin = eagle.deploy(kernel)
    assert plugin.host_path == "simd", plugin.host_simd_reason
    n = 203
    want, contributions = per_sample(kernel, planes(n))
    for entry, path in ((HostEntry(plugin), "simd"), (HostEntry(plugin, simd=False), "lanes"),
                        (HostEntry(plugin, lanes=1), "one")):
        bound = eagle.bind.bind(plugin, planes(n))
        rows = entry.run(bound.values, 0, n, threads=1)
        assert entry.path == path, (name, path, entry.simd_reason, entry.lanes_reason)
        for o, v in want.items():
            assert np.array_equal(bits(bound.values[o]), bits(v)), (name, path, o)
        for c, (op, values) in contributions.items():
            assert np.array_equal(bits(rows[c]), bits(np.array(row_partials(op, values)))), (name, path, c)


# -- Dask workers, MPI ranks, the CUDA simulator --------------------------------------------------

def test_dask_workers_same_bits():
    pytest.importorskip("distributed")
    import eagle_dask
    from tests.test_dask import WORKERS, on
    client = eagle_dask.local_cluster(n_workers=WORKERS, threads_per_worker=1)
    try:
        client.wait_for_workers(WORKERS, timeout=120)
        plugin = eagle.deploy(draws)
        for n in (0, 33, 301):
            ref = eplan.plan(plugin, structure=eexec.HostTeam).run(d=np.zeros((n, 4)), seed=5)
            for k in (1, 2, 3, WORKERS):
                got = eplan.plan(plugin, structure=on(client, k)).run(d=np.zeros((n, 4)), seed=5)
                assert np.array_equal(bits(got["d"]), bits(ref["d"])), (n, k)
                assert bits(got["total"]) == bits(ref["total"]), (n, k)
    finally:
        client.close()


_MPI_SCRIPT = """
import sys
import numpy as np
import eagle, eagle.exec as eexec
from eagle import plan as eplan
sys.path.insert(0, {scripts!r})
import _record
from tests.test_random import draws
rank, size = eexec.RankPartition.world()
arrays = {{}}
for n in (0, 33, 301):
    out = eplan.plan(eagle.deploy(draws), structure=eexec.RankPartition).run(d=np.zeros((n, 4)), seed=5)
    arrays[f"d{{n}}"], arrays[f"total{{n}}"] = out["d"], np.asarray(out["total"])
_record.write(rank, {{"rank": rank, "size": size}}, arrays)
"""


def test_mpi_ranks_same_bits(tmp_path):
    from tests import launch
    from tests.test_mpi import SCRIPTS, records
    script = tmp_path / "random_ranks.py"
    script.write_text(_MPI_SCRIPT.format(scripts=SCRIPTS))
    out = tmp_path / "out"
    out.mkdir()
    launch.mpiexec(2, [str(script), str(out)])
    plugin = eagle.deploy(draws)
    for rec in records(out, 2):
        assert rec["size"] == 2
        for n in (0, 33, 301):
            ref = eplan.plan(plugin, structure=eexec.HostTeam).run(d=np.zeros((n, 4)), seed=5)
            assert np.array_equal(bits(rec["arrays"][f"d{n}"]), bits(ref["d"])), (rec["rank"], n)
            assert bits(rec["arrays"][f"total{n}"]) == bits(ref["total"]), (rec["rank"], n)


_DEVICE_SCRIPT = """
import json
import numpy as np
import eagle, eagle.exec as eexec
from eagle import plan as eplan
from tests.test_random import draws
plugin = eagle.deploy(draws)
for n in (0, 77):
    host = eplan.plan(plugin, structure=eexec.HostTeam).run(d=np.zeros((n, 4)), seed=5)
    for parts in (1, 3):
        dev = eplan.plan(plugin, structure=eexec.DeviceKernel, npartitions=parts).run(d=np.zeros((n, 4)), seed=5)
        same = dev["d"].tobytes() == host["d"].tobytes() and dev["total"].tobytes() == host["total"].tobytes()
        print(json.dumps({"n": n, "parts": parts, "same": same}))
"""


def test_cuda_simulator_same_bits_as_host():
    """numba's CUDA simulator runs the device code as Python: the host's bits, every partitioning."""
    from tests.test_device import _env
    proc = subprocess.run([sys.executable, "-c", _DEVICE_SCRIPT], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=_env(NUMBA_ENABLE_CUDASIM="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(recs) == 4 and all(r["same"] for r in recs), recs


@pytest.mark.parametrize("ctr, key, expected", KAT)
def test_philox_counter_key_form_known_answers(ctr, key, expected):
    """philox(counter, key): Random123's answers, the scalar form's block, a counter as an array."""
    assert erandom.philox(ctr, key) == expected
    assert erandom.philox(np.array(ctr, dtype=np.uint32), key) == expected
    assert erandom.philox(tuple(np.uint64(c) for c in ctr), np.array(key, dtype=np.uint64)) == expected
    assert erandom.philox(ctr, key) == erandom.philox(*ctr, *key)


def test_philox_counter_key_form_refusals_and_kernel_scalar_form():
    with pytest.raises(ValueError, match="counter and key word"):
        erandom.philox((0, 0, 0, 2**32), (0, 0))
    with pytest.raises(ValueError, match="the counter is 4 words and the key 2"):
        erandom.philox(np.zeros(3, dtype=np.uint32), (0, 0))
    with pytest.raises(Exception, match="the counter is 4 words, got a tuple of 3"):
        erandom.philox((0, 0, 0), (0, 0))
    with pytest.raises(Exception, match="takes \\(c0, c1, c2, c3, k0, k1\\) or \\(counter, key\\)"):
        erandom.philox(0, 0, 0)

    @eagle.kernel
    def blocks(i, w: Out[4]):
        a, b, c, d = erandom.philox(i, 0, 0, 0, 7, 0)
        w[i, 0] = a
        w[i, 1] = b
        w[i, 2] = c
        w[i, 3] = d

    got = eplan.plan(blocks, structure=eexec.HostTeam, npartitions=2).run(w=np.zeros((5, 4)))
    want = np.array([ref_philox((s, 0, 0, 0), (7, 0)) for s in range(5)], dtype=np.float64)
    assert np.array_equal(got, want)


# -- refusals of words that are not integers, of keys of the wrong length and of key words out of range

DRAWS = [(erandom.uniform, ()), (erandom.uniform2, ()), (erandom.normal, ()), (erandom.normal2, ()),
         (erandom.exponential, ()), (erandom.bernoulli, (0.5,)), (erandom.uniform_range, (0.0, 2.0)),
         (erandom.integers, (0, 9))]


@pytest.mark.parametrize("fn, extra", DRAWS, ids=lambda v: getattr(v, "__name__", ""))
@pytest.mark.parametrize("coords, what", [((3, 2, 1.5), "draw counter k"), ((3.0, 2, 1), "seed"),
                                          ((3, 2.5, 1), "sample index i"), ((3, 2, np.float32(1)), "draw counter k")])
def test_non_integer_coordinates_are_refused_not_cast(fn, extra, coords, what):
    """k = 1.5 drew what k = 1 draws; now a refusal naming the coordinate (an integral float too)."""
    with pytest.raises(numba.core.errors.TypingError, match=f"eagle.random: the {what} .* where an integer goes"):
        fn(*coords, *extra)


@pytest.mark.parametrize("args, what", [
    ((0, 0, 0, 1.5, 0, 0), "word c3"), ((0, 0, 0, 0, 0, 2.0), "word k1"),
    (((0, 0, 0, 1.5), (0, 0)), "counter"), ((np.array([0.0, 0, 0, 1]), (0, 0)), "counter"),
    (((0, 0, 0, 1), (0.5, 0)), "key"), (((0, 0, 0, 1), np.array([0.5, 0.0])), "key")])
def test_philox_words_that_are_not_integers_are_refused(args, what):
    with pytest.raises(numba.core.errors.TypingError, match=f"eagle.random.philox: the {what} .* where an integer"):
        erandom.philox(*args)


def test_non_integer_counter_refused_inside_a_kernel_and_compiled_code():
    @eagle.kernel
    def draw_at(i, seed: Param, k: eagle.In, y: Out):
        y[i] = erandom.uniform(seed, i, k[i])

    with pytest.raises(TypeError, match=r"(?s)kernel 'draw_at' cannot be compiled.*the draw counter k \(float64\)"):
        eplan.plan(draw_at, structure=eexec.HostTeam).run(seed=3, k=np.array([1.5, 2.0]))
    got = eplan.plan(draw_at, structure=eexec.HostTeam).run(seed=3, k=np.array([1, 2]))
    assert got.tolist() == [erandom.uniform(3, 0, 1), erandom.uniform(3, 1, 2)]

    @numba.njit
    def block_of(counter, key):
        return erandom.philox(counter, key)

    with pytest.raises(numba.core.errors.TypingError, match="philox: the counter .* where an integer goes"):
        block_of(np.array([0.0, 0.0, 0.0, 1.5]), (0, 0))
    assert block_of(np.array([1, 2, 3, 4]), (5, 6)) == ref_philox((1, 2, 3, 4), (5, 6))


@pytest.mark.parametrize("key", [(0, 0, 0), (0,), np.zeros(3, dtype=np.uint32), np.zeros(1, dtype=np.uint32)],
                         ids=["tuple3", "tuple1", "array3", "array1"])
def test_philox_key_of_the_wrong_length_is_refused(key):
    with pytest.raises(Exception, match="the key is 2 words|the key 2"):
        erandom.philox((1, 2, 3, 4), key)


@pytest.mark.parametrize("k1", [2**32, -1])
def test_philox_second_key_word_range_checked(k1):
    with pytest.raises(ValueError, match="counter and key word"):
        erandom.philox(1, 2, 3, 4, 0, k1)
    with pytest.raises(ValueError, match="counter and key word"):
        erandom.philox((1, 2, 3, 4), (0, k1))
    with pytest.raises(ValueError, match="counter and key word"):
        erandom.philox((1, 2, 3, 4), np.array([0, k1], dtype=np.int64))
