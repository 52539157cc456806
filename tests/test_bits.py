"""eagle.bits: the one bit-for-bit comparison every identity test (and the benchmarks) relies on.

Equal means the same names, dtypes, shapes and raw bytes: NaNs with equal bits are equal,
-0.0 is not 0.0, and a value one ulp off is not equal.
"""
import numpy as np

import benchmarks.bits
import eagle
import tests.kernels
from eagle.bits import as_dict, same_bits


def test_equal_bytes_are_equal_and_nans_with_equal_bits_too():
    x = np.array([1.0, np.nan, -np.inf, 5e-324])
    assert same_bits(x, x.copy())
    assert same_bits(np.float64(np.nan), np.float64(np.nan))
    assert not (x == x.copy()).all()                         # what == would have said


def test_any_bit_of_difference_is_a_difference():
    x = np.array([1.0, 2.0, 3.0])
    y = x.copy()
    y[1] = np.nextafter(2.0, 3.0)
    assert not same_bits(x, y)
    assert not same_bits(np.float64(0.0), np.float64(-0.0))
    quiet, payload = np.array([np.nan]), np.array([np.nan])
    payload.view(np.uint64)[0] ^= 1
    assert np.isnan(payload[0]) and not same_bits(quiet, payload)


def test_dtype_and_shape_matter():
    assert not same_bits(np.zeros(3), np.zeros(3, dtype=np.float32))
    assert not same_bits(np.zeros(3, dtype=np.int64), np.zeros(3))
    assert not same_bits(np.zeros((2, 3)), np.zeros((3, 2)))
    assert not same_bits(np.zeros(6), np.zeros((6, 1)))
    assert not same_bits(np.float64(1.0), np.array([1.0]))


def test_dicts_compare_by_name():
    a = {"y": np.arange(3.0), "total": np.float64(3.0)}
    assert same_bits(a, {"y": np.arange(3.0), "total": np.float64(3.0)})
    assert not same_bits(a, {"y": np.arange(3.0)})
    assert not same_bits(a, {"y": np.arange(3.0), "total": np.float64(3.0), "more": np.zeros(0)})
    assert not same_bits(a, {"y": np.arange(3.0), "total": np.float64(4.0)})
    assert not same_bits(a, np.arange(3.0)) and not same_bits(np.arange(3.0), a)


def test_as_dict_names_a_bare_single_output():
    plugin = eagle.deploy(tests.kernels.axpb)
    y = np.arange(4.0)
    assert as_dict(plugin, y) == {"y": y} and as_dict(plugin, y)["y"] is y
    d = {"y": y}
    assert as_dict(plugin, d) is d


def test_the_tests_and_the_benchmarks_use_this_one_copy():
    assert tests.kernels.same_bits is same_bits and tests.kernels.as_dict is as_dict
    assert benchmarks.bits.same_bits is same_bits and benchmarks.bits.as_dict is as_dict
