"""Lazy Params: a run that depends on a reduction of another run, in one graph.

A 0-d dask array (a cell of an earlier lazy run, ``x.mean()``) given to a Param of a lazy
DaskPartition run: nothing is computed when the graph is built (the scheduler's transition
counter does not move), the blocks depend on it and read it on the worker, and the two-stage
result has the bits of the same two stages run on HostTeam.  On the local structures and in
the numpy mode, a 0-d array Param is its value.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import Cell, In, Out, Param
from eagle import plan as eplan
from tests import launch

da = pytest.importorskip("dask.array")
pytest.importorskip("distributed")


@eagle.kernel
def total(i, x: In, s: Cell["sum"]):
    s[i] = x[i]


@eagle.kernel
def share(i, x: In, s: Param, y: Out):
    y[i] = x[i] / s


@eagle.kernel
def repeat(i, x: In, times: Param, y: Out):
    acc = 0.0
    for _ in range(times):
        acc += x[i]
    y[i] = acc


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture(scope="module")
def client():
    with launch.local_client(2) as c:
        yield c


def _dask(client):
    import eagle_dask
    return eagle_dask.DaskPartition.on(client, progress=False)


def _transitions(client):
    time.sleep(HOLD_SETTLE)                    # a finished run's held futures are released by now
    return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)


HOLD_SETTLE = 1.0


def test_two_stage_graph_computes_nothing_until_asked_and_has_host_bits(client):
    x = np.random.default_rng(11).standard_normal(1000) + 0.1
    xd = da.from_array(x, chunks=250)
    before = _transitions(client)
    s = eplan.plan(total, structure=_dask(client)).run(x=xd)
    y = eplan.plan(share, structure=_dask(client)).run(x=xd, s=s)
    assert _transitions(client) == before, "building the two stages ran tasks on the cluster"
    assert isinstance(y, da.Array)
    assert s.name in {k[0] if isinstance(k, tuple) else k for k in y.__dask_graph__()}      # one graph
    got = y.compute()
    assert _transitions(client) > before
    s_host = eplan.plan(total, structure=eexec.HostTeam).run(x=x)
    want = eplan.plan(share, structure=eexec.HostTeam).run(x=x, s=s_host)
    assert same(got, want) and not same(got, x / (float(s_host) + 1.0))
    assert same(s.compute(), s_host)


def test_dask_mean_as_param_and_integer_range_param(client):
    x = np.linspace(-3.0, 5.0, 333)
    xd = da.from_array(x, chunks=100)
    m = xd.mean()
    y = eplan.plan(share, structure=_dask(client)).run(x=xd, s=m)
    assert same(y.compute(), eplan.plan(share, structure=eexec.HostTeam).run(x=x, s=m.compute()[()]))
    times = da.from_array(np.array([3, 4]), chunks=1).sum() - 4        # 3, lazily
    r = eplan.plan(repeat, structure=_dask(client)).run(x=xd, times=times)
    assert same(r.compute(), eplan.plan(repeat, structure=eexec.HostTeam).run(x=x, times=3))


def test_lazy_param_refusals_name_the_param(client):
    xd = da.from_array(np.ones(10), chunks=5)
    p = eplan.plan(share, structure=_dask(client))
    with pytest.raises(TypeError, match=r"Param 's' of kernel 'share' is a dask array of shape \(10,\).*0-d dask"):
        p.run(x=xd, s=xd)
    with pytest.raises(TypeError, match=r"Param 'times' of kernel 'repeat' is passed to range\(\) and must be an "
                                        r"integer, not a 0-d dask array of float64"):
        eplan.plan(repeat, structure=_dask(client)).run(x=xd, times=xd.sum())


def test_zero_d_array_param_is_its_value_on_local_structures_and_numpy_mode(client):
    x = np.arange(1.0, 8.0)
    want = x / 4.0
    for structure in (eexec.HostTeam, _dask(client)):
        p = eplan.plan(share, structure=structure)
        assert same(p.run(x=x, s=np.array(4.0)), want)
        assert same(p.run(x=x, s=4.0), want)
    assert same(eplan.plan(share, structure=eexec.HostTeam).run(x=x, s=da.from_array(np.array(4.0))), want)


def test_lazy_param_whose_dtype_lies_is_refused_as_host_team_refuses_its_value(client):
    """A 0-d dask array whose metadata says int64 but whose value is 10.5: checked on the worker
    by HostTeam's rule for that value (refused by name, never truncated to 10 in range())."""
    import dask
    x = np.linspace(0.0, 1.0, 40)
    liar = da.from_delayed(dask.delayed(np.float64)(10.5), shape=(), dtype=np.int64)
    assert liar.dtype == np.int64
    with pytest.raises(TypeError) as host:
        eplan.plan(repeat, structure=eexec.HostTeam).run(x=x, times=np.float64(10.5))
    lazy = eplan.plan(repeat, structure=_dask(client)).run(x=da.from_array(x, chunks=20), times=liar)
    with pytest.raises(TypeError) as worker:
        lazy.compute()
    assert str(worker.value) == str(host.value)
    assert "Param 'times' of kernel 'repeat' is passed to range() and must be an integer" in str(host.value)
    honest = da.from_delayed(dask.delayed(np.int64)(10), shape=(), dtype=np.int64)
    got = eplan.plan(repeat, structure=_dask(client)).run(x=da.from_array(x, chunks=20), times=honest).compute()
    assert same(got, np.array([sum(v for _ in range(10)) for v in x.tolist()]))
