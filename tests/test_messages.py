"""Mistakes a user makes with planes and declarations: each refused before anything runs, in a
message that names the kernel and the plane (or the line) and says what to do, under 300
characters; the caller's arrays are left as they were, and following the advice gives the
right result (numpy's, computed here)."""
from __future__ import annotations

import importlib.util
import re

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import In, Mutable, Out
from eagle import plan as eplan
from tests.kernels import same_bits

SHORT = 300


@eagle.kernel
def nudge(i, x: In, m: Mutable):
    m[i] = m[i] + 2.0 * x[i]


def run_nudge(x, m):
    return eplan.plan(eagle.deploy(nudge), structure=eexec.HostTeam).run(x=x, m=m)


def refused(exc, call, *parts):
    """``call()`` raises ``exc``; its message is short and holds every one of ``parts``."""
    with pytest.raises(exc) as err:
        call()
    msg = str(err.value)
    assert len(msg) < SHORT, (len(msg), msg)
    for part in parts:
        assert part in msg, (part, msg)
    return msg


def untouched(m, value=7.0):
    assert same_bits(m, np.full(m.shape[0], value)), "a plane was written before the refusal"


# --- planes given to a run ----------------------------------------------------------------------

def test_a_ragged_list_for_an_in_plane():
    m = np.full(2, 7.0)
    refused(ValueError, lambda: run_nudge([[1.0, 2.0], [3.0]], m),
            "In plane 'x'", "kernel 'nudge'", "ragged", "pad the rows")
    untouched(m)
    got = run_nudge([1.0, 3.0], m)                       # a list of one value per sample is a plane
    assert same_bits(got, np.array([9.0, 13.0]))


def test_a_masked_array_plane():
    x = np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, True, False])
    m = np.full(3, 7.0)
    refused(TypeError, lambda: run_nudge(x, m), "plane 'x'", "kernel 'nudge'", "masked array", "ignores its mask",
            "x.filled(value)")
    untouched(m)
    assert same_bits(x.data, np.array([1.0, 2.0, 3.0]))
    refused(TypeError, lambda: run_nudge(np.ones(3), np.ma.masked_array(m)), "plane 'm'", "kernel 'nudge'",
            "masked array")
    untouched(m)
    got = run_nudge(x.filled(0.0), m)                   # the advice, followed
    assert same_bits(got, np.array([9.0, 7.0, 13.0]))


@pytest.mark.parametrize("kind", ["In", "Mutable"])
def test_a_big_endian_plane(kind):
    x, m = np.arange(4.0), np.full(4, 7.0)
    if kind == "In":
        x = x.astype(">f8")
    else:
        m = m.astype(">f8")
    name = "x" if kind == "In" else "m"
    msg = refused(TypeError, lambda: run_nudge(x, m), f"plane {name!r}", "kernel 'nudge'", ">f8", "big-endian",
                  "byte order", f"{name}.astype('float64')")
    assert "Numba" not in msg
    assert same_bits(np.asarray(m, dtype=np.float64), np.full(4, 7.0))
    got = run_nudge(x.astype("float64"), m.astype("float64"))
    assert same_bits(got, 7.0 + 2.0 * np.arange(4.0))


def test_a_big_endian_out_plane_is_refused_by_the_same_rule():
    y = np.full(4, 7.0, dtype=">f8")
    refused(TypeError, lambda: eplan.plan(eagle.deploy(doubled), structure=eexec.HostTeam).run(x=np.ones(4), y=y),
            "plane 'y'", "kernel 'doubled'", ">f8", "big-endian")
    assert same_bits(y.astype("float64"), np.full(4, 7.0))


@pytest.mark.parametrize("dtype,better", [("float16", "float32"), (np.longdouble, "float64")])
def test_a_float_dtype_compiled_code_does_not_read(dtype, better):
    if np.dtype(dtype) == np.float64:
        pytest.skip("long double is float64 here")
    x, m = np.array([0.5, 1.5, 2.5], dtype=dtype), np.full(3, 7.0)
    refused(TypeError, lambda: run_nudge(x, m), "plane 'x'", "kernel 'nudge'", str(np.dtype(dtype)),
            "does not support", f"x.astype({better!r})")
    untouched(m)
    got = run_nudge(x.astype(better), m)
    assert same_bits(got, 7.0 + 2.0 * np.array([0.5, 1.5, 2.5]))


# --- declarations -------------------------------------------------------------------------------

@eagle.kernel
def doubled(i, x: In, y: Out):
    y[i] = 2.0 * x[i]


@pytest.mark.parametrize("declared,better", [("object", "Out['float64']"), ("float16", "Out['float32']"),
                                             ((3, "float16"), "Out[3, 'float32']"),
                                             (">f8", "Out['float64']"), ("U4", "Out['float64']")])
def test_an_out_dtype_no_plane_holds_is_refused_at_decoration(declared, better):
    """Refused where the kernel is written (the function is never deployed nor run)."""
    calls = []

    def boxed(i, x, y):
        calls.append(i)
        y[i] = x[i]
    boxed.__annotations__ = {"x": In, "y": Out[declared]}

    refused(TypeError, lambda: eagle.kernel(boxed), "kernel 'boxed'", "output 'y'", "declare it " + better)
    assert calls == []


@eagle.kernel
def first_column(i, x: In, y: Out):
    y[i, 0] = x[i]


def test_a_plain_out_indexed_as_a_vector_is_refused_at_deploy():
    msg = refused(ValueError, lambda: eagle.deploy(first_column), "kernel 'first_column'", "y[i, 0]",
                  "Out plane 'y'", "declare it Out[w]")
    line = re.search(r"line (\d+)", msg)
    import inspect
    lines, first = inspect.getsourcelines(first_column.fn)
    assert line and int(line.group(1)) == first + next(k for k, t in enumerate(lines) if "y[i, 0]" in t)


@eagle.kernel
def first_column_declared(i, x: In, y: Out[2]):
    y[i, 0] = x[i]
    y[i, 1] = -x[i]


def test_the_advice_out_w_runs():
    got = eplan.plan(eagle.deploy(first_column_declared), structure=eexec.HostTeam).run(x=np.arange(3.0))
    assert same_bits(got, np.stack([np.arange(3.0), -np.arange(3.0)], axis=1))


# --- numpy's linear algebra, which numba compiles with scipy --------------------------------------

@eagle.kernel
def inverse_trace(i, x: In, y: Out):
    a = np.empty((2, 2))
    a[0, 0], a[0, 1], a[1, 0], a[1, 1] = x[i], 1.0, 1.0, 2.0
    b = np.linalg.inv(a)
    y[i] = b[0, 0] + b[1, 1]


HAVE_SCIPY = importlib.util.find_spec("scipy") is not None


@pytest.mark.skipif(HAVE_SCIPY, reason="scipy is installed: the kernel compiles (next test)")
def test_linear_algebra_without_scipy_is_refused_at_deploy():
    refused(ValueError, lambda: eagle.deploy(inverse_trace), "kernel 'inverse_trace'", "numpy.linalg.inv",
            "scipy", "pip install scipy")


@pytest.mark.skipif(not HAVE_SCIPY, reason="scipy is not installed: deploy refuses (previous test)")
def test_linear_algebra_with_scipy_runs():
    x = np.array([3.0, 5.0, 7.0])
    got = eplan.plan(eagle.deploy(inverse_trace), structure=eexec.HostTeam).run(x=x)
    want = [np.trace(np.linalg.inv(np.array([[v, 1.0], [1.0, 2.0]]))) for v in x]
    assert np.allclose(got, want, rtol=1e-12)


def test_a_kernel_called_like_a_function_says_how_to_run_it():
    x = np.arange(4.0)
    refused(TypeError, lambda: nudge(x, x), "kernel 'nudge'", "eagle.deploy(nudge)",
                  ".run(x=..., m=...)", "nudge(i, ...)")
    # the advice runs, and a call with every argument still runs one sample in Python
    m = np.ones(4)
    assert same_bits(run_nudge(x, m.copy()), 1.0 + 2.0 * x)
    one = np.ones(4)
    nudge(2, x, one)
    assert same_bits(one, np.array([1.0, 1.0, 5.0, 1.0]))


@pytest.mark.parametrize("structure", ["HostTeam", "DeviceKernel", "RankPartition"])
def test_a_structure_called_like_a_class_says_to_drop_the_parentheses(structure):
    s = getattr(eexec, structure)
    refused(TypeError, lambda: s(), f"eagle.exec.{structure} is a structure already",
            f"structure=eagle.exec.{structure}", "without parentheses")
    x = np.arange(3.0)
    assert same_bits(eplan.plan(eagle.deploy(nudge), structure=eexec.HostTeam).run(x=x, m=np.zeros(3)), 2.0 * x)


def test_dask_partition_called_like_a_class_points_to_on():
    eagle_dask = pytest.importorskip("eagle_dask")
    refused(TypeError, lambda: eagle_dask.DaskPartition("tls://127.0.0.1:1"), "eagle_dask.DaskPartition is a "
            "structure already", "DaskPartition.on(client, ...)")
