"""The tests' own reference (``tests/reference.py``) checked by hand and against ``math.fsum``,
so that what the other tests expect is right independently of eagle -- and then eagle's
``split`` / ``share`` / ``row_partials`` / ``fold`` checked against it."""
from __future__ import annotations

import math

import numpy as np
import pytest

from eagle import rows as erows
from tests import reference as ref


# --- the split, by hand -------------------------------------------------------------------------

def test_blocks_by_hand():
    assert ref.blocks(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert ref.blocks(9, 3) == [(0, 3), (3, 6), (6, 9)]
    assert ref.blocks(2, 3) == [(0, 1), (1, 2), (2, 2)]
    assert ref.blocks(0, 2) == [(0, 0), (0, 0)]
    assert ref.blocks(7, 1) == [(0, 7)]


def test_rows_by_hand():
    assert ref.cut(100, 3, rows=True) == [(0, 64), (64, 96), (96, 100)]     # 4 rows: 2, 1, 1
    assert ref.cut(33, 2, rows=True) == [(0, 32), (32, 33)]
    assert ref.cut(31, 2, rows=True) == [(0, 31), (31, 31)]                # one short row, one owner
    assert ref.cut(64, 3, rows=True) == [(0, 32), (32, 64), (64, 64)]
    assert ref.cut(0, 2, rows=True) == [(0, 0), (0, 0)]
    assert ref.part_of(96, 100, 3, rows=True) == 2 and ref.part_of(95, 100, 3, rows=True) == 1
    assert ref.part_of(7, 10, 3) == 2 and ref.part_of(3, 10, 3) == 0


# --- the fold, by hand and against math.fsum ----------------------------------------------------

def test_neumaier_by_hand():
    assert ref.cell("sum", [1e100, 1.0, -1e100]) == 1.0          # a plain sum gives 0.0
    assert sum([1e100, 1.0, -1e100]) == 0.0
    assert ref.fold_partials("sum", [(1e16, 1.0), (1.0, 0.0)]) == 1e16 + 2.0
    assert ref.fold_partials("sum", [(1.0, 0.5), (2.0, 0.25)]) == 3.75
    assert ref.cell("sum", [1e308, 1e308]) == math.inf             # overflow: inf, not nan
    assert ref.cell("sum", [math.inf, 1.0]) == math.inf
    assert math.isnan(ref.cell("sum", [math.inf, -math.inf]))


def test_the_other_ops_by_hand():
    assert ref.cell("times", [2.0, 3.0, 0.5]) == 3.0
    assert ref.cell("max", [1.0, 7.0, -2.0]) == 7.0 and ref.cell("min", [1.0, 7.0, -2.0]) == -2.0
    assert math.isnan(ref.cell("max", [1.0, math.nan, 7.0])) and math.isnan(ref.cell("min", [math.nan, 1.0]))
    assert ref.cell("land", [1.0, 7.0, -2.0]) == 1.0 and ref.cell("land", [1.0, 0.0, 3.0]) == 0.0
    for op, ident in ref.IDENTITY.items():
        assert ref.cell(op, []) == ident


def test_rows_fold_in_sample_order_then_row_order():
    """The row partials are what the rule says: 32 values each, the last row short."""
    values = [float(k) for k in range(70)]
    parts = ref.row_partials("sum", values)
    assert [s for s, _ in parts] == [sum(range(0, 32)), sum(range(32, 64)), sum(range(64, 70))]
    assert all(c == 0.0 for _, c in parts)
    # a row that loses a bit keeps it in its compensation; the fold adds it back
    lossy = [2.0 ** 53] + [1.0] * 30
    [(s, c)] = ref.row_partials("sum", lossy)
    assert (s, c) == (2.0 ** 53, 30.0)
    assert sum(lossy) == 2.0 ** 53
    assert ref.cell("sum", lossy) == 2.0 ** 53 + 30.0 == math.fsum(lossy)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sums_of_integers_equal_fsum_exactly(seed):
    """Integers below 2**53 add exactly: the reference must give fsum's value, bit for bit."""
    rng = np.random.default_rng(seed)
    x = [float(v) for v in rng.integers(-2 ** 40, 2 ** 40, 1001)]
    assert ref.cell("sum", x) == math.fsum(x)


def test_cancellation_equals_fsum_exactly():
    x = [1e16, 1.0, 1.0, -1e16] * 20 + [3.0]
    assert sum(x) != math.fsum(x)
    assert ref.cell("sum", x) == math.fsum(x) == 43.0


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_sums_over_30_orders_of_magnitude_are_within_one_ulp_of_fsum(seed):
    rng = np.random.default_rng(seed)
    x = list(10.0 ** rng.uniform(-15.0, 15.0, 3001) * rng.choice([-1.0, 1.0], 3001))
    exact = math.fsum(x)
    got = ref.cell("sum", x)
    assert abs(got - exact) <= math.ulp(exact), (got, exact)


# --- eagle against the reference ----------------------------------------------------------------

def test_eagle_split_and_share_follow_the_rule():
    for n in (0, 1, 2, 5, 31, 32, 33, 63, 64, 65, 97, 100, 1001, 4099):
        for parts in (1, 2, 3, 4, 5, 7, 40):
            for rows in (False, True):
                want = ref.cut(n, parts, rows)
                got = erows.split(n, parts, rows=rows)
                assert [(p.base, p.stop) for p in got] == want, (n, parts, rows)
                assert all(p.n_samples == n for p in got)
                assert [tuple(erows.share(n, r, parts, rows=rows))[:2] for r in range(parts)] == \
                    [(a, b - a) for a, b in want]


@pytest.mark.parametrize("op", list(ref.IDENTITY))
def test_eagle_row_partials_and_fold_follow_the_rule(op):
    rng = np.random.default_rng(11)
    x = rng.uniform(0.5, 1.5, 1000) * 10.0 ** rng.integers(-3, 4, 1000) * rng.choice([-1.0, 1.0], 1000)
    x[::5] = 1.0 + rng.uniform(-1e-3, 1e-3, x[::5].shape)
    rows = erows.row_partials(op, x)
    assert rows.tolist() == [list(p) for p in ref.row_partials(op, x)]
    assert erows.fold(op, rows) == ref.cell(op, x)
    assert erows.reduce_samples(op, x) == ref.cell(op, x)
    assert erows.fold(op, x[:50]) == ref.fold_values(op, x[:50])
