"""``eagle_dask.copies``: the driver's two-thread copy gives exactly numpy's single copy."""
import numpy as np
import pytest

from eagle_dask import copies


def _pairs(rng, shapes, dtype):
    src = [rng.standard_normal(s).astype(dtype) for s in shapes]
    return [(np.full(s.shape, np.nan, dtype) if dtype.kind == "f" else np.zeros(s.shape, dtype), s) for s in src]


@pytest.mark.parametrize("shapes", [
    [(10**6,), (10**6,), (10**6,)],              # three planes of 8 MB: the middle one cut
    [(3 * 10**5, 3), (7,), (0,), (10**5,)],      # a 2-D plane cut by rows, a tiny and an empty one
    [(1,), (2 * 10**6,)],                        # one plane holds almost all the bytes
    [(5,), (3,)],                                # under SPLIT_BYTES: the caller alone
    [(1, 10**6)],                                # one row: cannot be cut
])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int16])
def test_copy_all_gives_numpys_copy(shapes, dtype):
    rng = np.random.default_rng(len(shapes))
    pairs = _pairs(rng, shapes, np.dtype(dtype))
    copies.copy_all(pairs)
    for d, s in pairs:
        assert d.shape == s.shape and d.tobytes() == s.tobytes()


def test_halves_cover_every_byte_once_and_split_evenly():
    rng = np.random.default_rng(3)
    pairs = _pairs(rng, [(10**6,), (3 * 10**5, 3), (11,)], np.dtype(np.float64))
    first, second = copies.halves(pairs)
    total = sum(d.nbytes for d, _ in pairs)
    assert sum(d.nbytes for d, _ in first) + sum(d.nbytes for d, _ in second) == total
    assert abs(sum(d.nbytes for d, _ in first) - total / 2) <= 3 * 8     # within one row of the middle
    marks = [np.zeros(d.shape, np.int8) for d, _ in pairs]
    for part in (first, second):
        for d, _ in part:
            owner = next(m for m, (full, _) in zip(marks, pairs) if np.shares_memory(d, full))
            base = (d.__array_interface__["data"][0]
                    - next(full for full, _ in pairs if np.shares_memory(d, full)).__array_interface__["data"][0])
            rows = base // (d.nbytes // max(len(d), 1)) if len(d) else 0
            owner[rows:rows + len(d)] += 1
    assert all((m == 1).all() for m in marks)


def test_a_failing_copy_is_raised_after_both_halves_ended():
    big = np.zeros(10**6)
    bad = (np.zeros(10**6), np.zeros(10**6 + 1))           # shapes that do not broadcast
    with pytest.raises(ValueError):
        copies.copy_all([(big, np.ones(10**6)), bad])
    assert (big == 1).all()                                 # the other half was copied, not abandoned
