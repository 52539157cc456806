"""Cells: reductions over samples with the same bits at every split.

The reference is the design's rule written out in plain Python in ``tests/reference.py`` (rows
of 32 folded in sample order, Neumaier pairs for ``sum``, row partials folded in row order); a
``sum`` is also checked against ``math.fsum``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import Cell, In
from eagle import plan as eplan
from eagle.rows import row_partials
from tests import reference as ref
from tests.kernels import same_bits

OPS = ("sum", "times", "max", "min", "land")
IDENTITY = ref.IDENTITY


@eagle.kernel
def every_op(i, x: In, s: Cell["sum"], t: Cell["times"], hi: Cell["max"], lo: Cell["min"], every: Cell["land"]):
    v = x[i]
    s[i] = v
    t[i] = v
    hi[i] = v
    lo[i] = v
    every[i] = v


@eagle.kernel
def total(i, x: In, s: Cell["sum"]):
    s[i] = x[i]


CELL_OF = {"sum": "s", "times": "t", "max": "hi", "min": "lo", "land": "every"}


# --- the design's rule, independently: tests/reference.py ----------------------------------------

def design_value(op, values):
    """Rows of 32 folded in sample order, then the row partials in row order."""
    return ref.cell(op, values)


def within_one_ulp(got, exact):
    return np.nextafter(exact, -np.inf) <= got <= np.nextafter(exact, np.inf)


def host(kernel, **how):
    return eplan.plan(eagle.deploy(kernel), structure=eexec.HostTeam, **how)


def values_for(n, seed=7):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, 1.5, n) * 10.0 ** rng.integers(-3, 4, n) * rng.choice([-1.0, 1.0], n)
    x[::5] = 1.0 + rng.uniform(-1e-3, 1e-3, x[::5].shape)    # keep the product finite and non-trivial
    return x


def aligned_partitions(n):
    bases = sorted({0, *(b for b in (32, 64, 160, (n // 2) // 32 * 32) if b <= n)})
    return [(b, e - b) for b, e in zip(bases, bases[1:] + [n])]


# --- every split, the same bits ----------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 64, 65, 1000, 4099])
def test_cells_have_the_same_bits_at_every_split(n, team):
    x = values_for(n)
    want = {CELL_OF[op]: np.float64(design_value(op, x)) for op in OPS}
    for threads in (1, 2, 3):
        team(threads)
        for k in (1, 2, 3, 4, 5, 7, 11):
            assert same_bits(host(every_op, npartitions=k).run(x=x), want), (n, threads, k)
        parts = aligned_partitions(n)
        assert same_bits(host(every_op, partitions=parts).run(x=x), want), (n, threads, parts)


@pytest.mark.parametrize("n", [0, 1, 33, 100, 1000])
def test_ranks_folding_row_partials_get_the_same_bits(n, team):
    """Shares cut as ranks and workers cut them, run alone (whole planes or sliced), then folded."""
    team(2)
    x = values_for(n, seed=3)
    plugin = eagle.deploy(every_op)
    assert "x" in plugin.sliceable
    want = {CELL_OF[op]: np.float64(design_value(op, x)) for op in OPS}
    assert same_bits(host(every_op).run(x=x), want)
    for size in (1, 2, 3, 5, 40):
        shares = ref.cut(n, size, rows=True)
        whole = [eexec.HostTeam.run_range(plugin, {"x": x}, a, b) for a, b in shares]
        sliced = [eexec.HostTeam.run_range(plugin, {"x": x[a:b].copy()}, a, b, po=a) for a, b in shares]
        for parts in (whole, sliced):
            got = {c: eexec.fold(op, np.concatenate([rows[c] for rows in parts]))
                   for c, op in plugin.cells.items()}
            assert same_bits(got, want), (n, size)


# --- sums over 30 orders of magnitude ----------------------------------------------------------

@pytest.mark.parametrize("signs", ["random", "positive"])
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_a_sum_over_30_orders_of_magnitude_is_within_one_ulp_of_fsum(seed, signs, team):
    rng = np.random.default_rng(seed)
    n = 3001
    x = 10.0 ** rng.uniform(-15.0, 15.0, n)
    if signs == "random":
        x *= rng.choice([-1.0, 1.0], n)
    assert x.max() / x.min() > 1e25 if signs == "positive" else np.abs(x).max() / np.abs(x).min() > 1e25
    exact = math.fsum(x)
    want = host(total).run(x=x)
    assert within_one_ulp(want, exact), (want, exact, np.spacing(exact))
    assert want == np.float64(design_value("sum", x))
    for threads in (2, 3):
        team(threads)
        assert same_bits(host(total, npartitions=5).run(x=x), want)


def test_compensation_makes_a_difference():
    """A cancelling sum the plain sum gets wrong, and the cell gets exactly."""
    x = np.array([1e16, 1.0, 1.0, -1e16] * 20 + [3.0])
    assert sum(x) != math.fsum(x)
    assert host(total).run(x=x) == math.fsum(x) == 43.0


# --- n = 0, inf and nan ------------------------------------------------------------------------

def test_no_samples_give_each_ops_identity(team):
    for threads in (1, 3):
        team(threads)
        for k in (1, 4):
            out = host(every_op, npartitions=k).run(x=np.empty(0))
            assert out == {"s": 0.0, "t": 1.0, "hi": -np.inf, "lo": np.inf, "every": 1.0}
            assert all(type(v) is np.float64 for v in out.values())
    assert np.signbit(host(total).run(x=np.empty(0))) == np.signbit(0.0)


@pytest.mark.parametrize("where", [0, 31, 32, 500, 999])
def test_an_infinite_contribution_gives_inf_not_nan(where, team):
    x = values_for(1000)
    x[where] = np.inf
    for threads in (1, 3):
        team(threads)
        out = host(every_op, npartitions=3).run(x=x)
        assert out["s"] == np.inf and out["hi"] == np.inf and out["lo"] == x.min()
    x[where] = -np.inf
    assert host(total, npartitions=2).run(x=x) == -np.inf


def test_an_overflowing_sum_is_inf_not_nan():
    x = np.full(100, 1e307)
    assert host(total).run(x=x) == np.inf
    assert host(total).run(x=-x) == -np.inf


def test_nan_and_opposite_infinities_give_nan(team):
    team(3)
    x = values_for(200)
    x[70] = np.nan
    out = host(every_op, npartitions=3).run(x=x)
    for cell in ("s", "t", "hi", "lo"):
        assert np.isnan(out[cell]), cell
    y = values_for(200)
    y[3], y[150] = np.inf, -np.inf
    assert np.isnan(host(total).run(x=y))


def test_land_is_one_while_every_contribution_is_non_zero():
    x = values_for(300)
    assert host(every_op).run(x=x)["every"] == 1.0
    x[299] = 0.0
    assert host(every_op).run(x=x)["every"] == 0.0


# --- eagle.exec.fold ---------------------------------------------------------------------------

def test_fold_of_plain_values_is_a_float64_in_index_order():
    got = eexec.fold("sum", [1e100, 1.0, -1e100])
    assert type(got) is np.float64 and got == 1.0
    rng = np.random.default_rng(0)
    x = rng.normal(size=50) * 10.0 ** rng.integers(-8, 8, 50)
    for op in OPS:
        want = ref.fold_values(op, x)
        assert eexec.fold(op, x) == want, op
        assert eexec.fold(op, list(x)) == want, op
    assert eexec.fold("times", [2.0, 3.0, 0.5]) == 3.0
    assert eexec.fold("max", [1.0, 7.0, -2.0]) == 7.0
    assert eexec.fold("min", [1.0, 7.0, -2.0]) == -2.0
    assert eexec.fold("land", [1.0, 7.0, -2.0]) == 1.0 and eexec.fold("land", [1.0, 0.0]) == 0.0


def test_fold_keeps_both_halves_of_sum_pairs():
    # 1e16 + 1.0 rounds to 1e16: the step's compensation (1.0) and the pair's own (1.0) restore it
    assert eexec.fold("sum", np.array([[1e16, 1.0], [1.0, 0.0]])) == 1e16 + 2.0
    assert eexec.fold("sum", np.array([[1.0, 0.5], [2.0, 0.25]])) == 3.75


@pytest.mark.parametrize("op", OPS)
def test_fold_of_nothing_is_the_identity(op):
    assert same_bits(eexec.fold(op, []), np.float64(IDENTITY[op]))
    assert same_bits(eexec.fold(op, np.empty((0, 2))), np.float64(IDENTITY[op]))


@pytest.mark.parametrize("op", OPS)
def test_where_rows_are_cut_does_not_change_the_fold(op):
    x = values_for(1000, seed=11)
    want = eexec.fold(op, row_partials(op, x))
    assert want == np.float64(design_value(op, x))
    for cuts in ([64], [32, 96, 480], [0, 992], list(range(32, 1000, 32))):
        bounds = [0, *cuts, 1000]
        parts = np.concatenate([row_partials(op, x[a:b]) for a, b in zip(bounds, bounds[1:])])
        assert same_bits(eexec.fold(op, parts), want), cuts


def test_fold_refuses_what_it_cannot_fold():
    with pytest.raises(ValueError, match=r"unknown cell op 'avg'.*sum, times, max, min, land"):
        eexec.fold("avg", [1.0])
    with pytest.raises(ValueError, match=r"fold\('sum', \.\.\.\).*\(k, 2\).*shape \(3, 3\)"):
        eexec.fold("sum", np.zeros((3, 3)))
