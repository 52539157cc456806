"""xarray in, xarray out: DataArray planes (numpy- and dask-backed), a Dataset's variables, 0-d
Params, pandas Series, and the refusals, each naming the plane.  References are plain numpy."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import Cell, In, Mutable, Out, Param, Table
from eagle import plan as eplan
from tests import launch

xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")


@eagle.kernel
def scaled(i, x: In, w: In, a: Param, m: Mutable, y: Out, q: Out[3], total: Cell["sum"]):
    y[i] = a * x[i] + w[i, 1]
    for k in range(3):
        q[i, k] = x[i] * (k + 1)
    m[i] = m[i] - x[i]
    total[i] = x[i]


@eagle.kernel
def ax(i, x: In, a: Param, y: Out):
    y[i] = a * x[i]


@eagle.kernel
def tabled(i, x: In, t: Table, y: Out):
    y[i] = x[i] * t[1, 0]


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def arrays(n=101):
    rng = np.random.default_rng(5)
    time = np.arange(n) * 0.5 + 1000.0
    x = xr.DataArray(rng.standard_normal(n), dims=("time",), coords={"time": time}, name="x")
    w = xr.DataArray(rng.standard_normal((n, 2)), dims=("time", "pair"), coords={"time": time})
    m = xr.DataArray(rng.standard_normal(n), dims=("time",), coords={"time": time})
    return x, w, m


def reference(x, w, m, a):
    x, w = np.asarray(x), np.asarray(w)
    return a * x + w[:, 1], x[:, None] * np.array([1.0, 2.0, 3.0]), np.asarray(m) - x


def test_importing_eagle_does_not_import_xarray():
    code = "import sys, eagle, eagle.exec, eagle.plan, eagle_dask; print('xarray' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=launch.loopback_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_numpy_backed_round_trip_with_coordinates():
    x, w, m = arrays()
    y_ref, q_ref, m_ref = reference(x, w, m, 2.5)
    out = eplan.plan(scaled, structure=eexec.HostTeam, npartitions=3).run(
        x=x, w=w, a=xr.DataArray(2.5), m=m)
    for name in ("y", "q", "m"):
        assert isinstance(out[name], xr.DataArray), name
        assert out[name].dims[0] == "time" and same(out[name]["time"], x["time"]), name
    assert out["q"].dims == ("time", "q_dim_1") and out["y"].name == "y"
    assert out["m"] is m                              # written in place, returned as given
    assert same(out["y"], y_ref) and same(out["q"], q_ref) and same(m, m_ref)
    assert isinstance(out["total"], np.float64)


def test_dataset_variables_and_zero_d_numpy_param():
    x, w, m = arrays()
    ds = xr.Dataset({"x": x, "w": w, "m": m})
    y_ref, _, m_ref = reference(x, w, m, 0.75)
    out = eplan.plan(scaled, structure=eexec.HostTeam).run(a=np.array(0.75), **ds.data_vars)
    assert same(out["y"], y_ref) and same(ds["m"], m_ref)
    assert same(out["y"]["time"], ds["time"])


def test_pandas_series_plane_keeps_working():
    s = pd.Series(np.linspace(0.0, 1.0, 7))
    y = eplan.plan(ax, structure=eexec.HostTeam).run(x=s, a=3.0)
    assert isinstance(y, np.ndarray) and same(y, 3.0 * s.to_numpy())


def test_table_as_dataarray_and_no_coordinate():
    x = xr.DataArray(np.arange(5.0), dims=("s",))
    t = xr.DataArray(np.array([[1.0, 2.0], [4.0, 8.0]]), dims=("r", "c"))
    y = eplan.plan(tabled, structure=eexec.HostTeam).run(x=x, t=t)
    assert isinstance(y, xr.DataArray) and y.dims == ("s",) and "s" not in y.coords
    assert same(y, np.arange(5.0) * 4.0)


def test_refusals_name_the_plane():
    x, w, m = arrays()
    p = eplan.plan(scaled, structure=eexec.HostTeam)
    with pytest.raises(ValueError, match=r"plane 'w' of kernel 'scaled' has samples along 'other', but plane 'x' "
                                         r"along 'time'"):
        p.run(x=x, w=w.rename(time="other"), a=1.0, m=m)
    shifted = m.assign_coords(time=m["time"] + 1.0)
    with pytest.raises(ValueError, match=r"plane 'm' of kernel 'scaled' has another 'time' coordinate than plane 'x'"):
        p.run(x=x, w=w, a=1.0, m=shifted)
    frozen = xr.DataArray(np.broadcast_to(np.zeros(1), (101,)), dims=("time",), coords={"time": x["time"]})
    with pytest.raises(ValueError, match=r"Mutable plane 'm' of kernel 'scaled' is a DataArray holding read-only "
                                         r"numpy data.*m.copy\(\)"):
        p.run(x=x, w=w, a=1.0, m=frozen)


def test_chunked_along_second_dimension_refused_with_the_rechunk():
    pytest.importorskip("dask.array")
    x, w, m = arrays()
    with pytest.raises(ValueError, match=r"plane 'w' of kernel 'scaled' is a DataArray chunked along 'pair'.*"
                                         r"w.chunk\(\{'pair': -1\}\)"):
        eplan.plan(scaled, structure=eexec.HostTeam).run(x=x, w=w.chunk({"time": 50, "pair": 1}), a=1.0, m=m)


@pytest.fixture(scope="module")
def client():
    pytest.importorskip("distributed")
    with launch.local_client(2) as c:
        yield c


def test_dask_backed_round_trip_is_lazy(client):
    import dask.array as da
    import eagle_dask
    x, w, m = arrays()
    y_ref, q_ref, m_ref = reference(x, w, m, 1.5)
    p = eplan.plan(scaled, structure=eagle_dask.DaskPartition.on(client, progress=False))
    out = p.run(x=x.chunk({"time": 40}), w=w.chunk({"time": 30}), a=1.5, m=m.chunk({"time": 40}))
    for name in ("y", "q", "m"):
        assert isinstance(out[name], xr.DataArray) and isinstance(out[name].data, da.Array), name
        assert same(out[name]["time"], x["time"]), name
    assert out["q"].dims == ("time", "q_dim_1")
    assert same(out["y"].compute(), y_ref) and same(out["q"].compute(), q_ref)
    assert same(out["m"].compute(), m_ref) and not same(m, m_ref)      # lazy: the caller's m untouched
    total = eplan.plan(scaled, structure=eexec.HostTeam).run(x=x, w=w, a=1.5, m=m.copy())["total"]
    assert same(out["total"].compute(), total)
    # numpy-backed planes on the same cluster (the numpy mode): DataArrays back, m written in place
    m2 = m.copy()
    eager = p.run(x=x, w=w, a=1.5, m=m2)
    assert eager["m"] is m2 and same(m2, m_ref) and same(eager["q"], q_ref)
    assert isinstance(eager["y"], xr.DataArray) and same(eager["y"]["time"], x["time"]) and same(eager["y"], y_ref)
    # a 0-d dask-backed DataArray (a reduction) as the Param: a lazy Param, read on the workers
    xd = x.chunk({"time": 40})
    lazy = p.run(x=xd, w=w.chunk({"time": 30}), a=xd.mean(), m=m.chunk({"time": 40}))
    host = eplan.plan(scaled, structure=eexec.HostTeam).run(x=x, w=w, a=float(xd.mean().compute()), m=m.copy())
    assert isinstance(lazy["y"].data, da.Array) and same(lazy["y"].compute(), host["y"])


def test_a_coordinate_carried_only_by_a_later_plane_reaches_the_outputs():
    """The first plane has no coordinate along the samples, a later one has: the outputs carry it."""
    x, w, m = arrays()
    bare = xr.DataArray(np.asarray(x), dims=("time",))
    y_ref, q_ref, _ = reference(x, w, m, 1.5)
    for kw in (dict(x=bare, w=w, a=1.5, m=m.copy()), dict(m=m.copy(), a=1.5, w=w, x=bare)):
        out = eplan.plan(scaled, structure=eexec.HostTeam).run(**kw)
        for name in ("y", "q"):
            assert "time" in out[name].coords, f"{name}: the coordinate of plane 'w' was dropped"
            assert same(out[name]["time"], w["time"]), name
        assert same(out["y"], y_ref) and same(out["q"], q_ref)


def test_a_transposed_plane_is_told_to_put_its_samples_first():
    """A plane whose samples are its second dimension (chunked along them, or not, or un-chunked
    as an earlier message asked): the message names the plane and the transpose; following it
    gives numpy's bits."""
    pytest.importorskip("dask.array")
    x, w, m = arrays()
    turned = w.transpose("pair", "time").chunk({"time": 50})
    p = eplan.plan(scaled, structure=eexec.HostTeam)
    for given in (turned, turned.chunk({"time": -1}), turned.compute()):
        with pytest.raises(ValueError, match=r"plane 'w' of kernel 'scaled' has its samples 'time' as its second "
                                             r"dimension.*pass w\.transpose\('time', \.\.\.\)") as got:
            p.run(x=x, w=given, a=1.0, m=m.copy())
        assert len(str(got.value)) < 300 and "chunk(" not in str(got.value)
    out = p.run(x=x, w=turned.transpose("time", ...), a=1.0, m=m.copy())
    assert same(out["y"], reference(x, w, m, 1.0)[0])


def test_a_lone_plane_chunked_along_its_second_dimension_names_both_fixes():
    """No 1-d plane says which dimension is the samples: the message offers the transpose first,
    then the rechunk, both naming the plane."""
    pytest.importorskip("dask.array")
    from tests import kernels as K
    p = xr.DataArray(np.ones((100, 3)), dims=("s", "c")).transpose("c", "s").chunk({"s": 30})
    with pytest.raises(ValueError, match=r"plane 'p' of kernel 'vectors' is a DataArray chunked along 's'.*"
                                         r"If 's' is the samples, pass p\.transpose\('s', \.\.\.\); if not, "
                                         r"p\.chunk\(\{'s': -1\}\)"):
        eplan.plan(eagle.deploy(K.vectors), structure=eexec.HostTeam).run(p=p, scale=2.0)
