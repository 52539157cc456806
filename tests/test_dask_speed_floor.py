"""The lazy row's floor in ``benchmarks.dask_speed``: distributed's own graph of the shape an eagle
lazy run makes, with no kernel in it -- as many tasks as eagle's graph adds, the inputs copied
through; and the floor's arithmetic, (reference + distributed alone) / reference."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("distributed")

import eagle  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from eagle.models import oscillator  # noqa: E402
from benchmarks import dask_speed as ds  # noqa: E402
from benchmarks import report  # noqa: E402
from benchmarks.dask_arrays import fresh  # noqa: E402
from eagle_dask import DaskPartition  # noqa: E402
from tests.launch import local_client  # noqa: E402


@pytest.mark.parametrize("n, chunks", [(2 * 65536, 65536), (3 * 70_016, 70_016)])
def test_the_null_graph_has_eagles_shape_and_copies_the_inputs(n, chunks):
    """At chunks of at least ``eagle_dask.arrays.MIN_BLOCK`` samples, cut on whole rows of a cell
    (the benchmark's: 500 000), eagle runs a block per chunk; the null graph has as many tasks."""
    d = ds.oscillators(n, 5, 3)
    with local_client(2) as client:
        w, x, v = fresh(client, [d["omega"], d["x"], d["v"]], chunks)
        out = eplan.plan(eagle.deploy(oscillator), structure=DaskPartition.on(client, progress=False)).run(
            omega=w, dt=ds.DT, steps=5, x=x, v=v)
        ours = list(out.values())
        null = ds.own_lazy_graph(w, x, v)
        assert ds.added_tasks(null, [w, x, v]) == ds.added_tasks(ours, [w, x, v])
        got = client.compute(null, sync=True)
    assert got[0].tobytes() == d["x"].tobytes() and got[1].tobytes() == d["v"].tobytes()
    assert got[2] == 0.0


def test_the_floor_is_the_reference_plus_distributed_alone():
    def r(arm, s):
        return report.Row("lazy, 2 chunks", arm, 1, 10, repeats=3, median_s=s, spread_s=0.0, identical="yes")
    rows = [r("one process", 0.050), r("lazy, 2 chunks, persisted", 0.080), r(ds.OWN_LAZY_GRAPH, 0.025)]
    assert ds.floors(rows) == {"lazy, 2 chunks": pytest.approx(1.5)}
    assert ds.floors(rows[:2]) == {}
    assert "one process + distributed alone: 1.50x" in ds.summary(ds.figures(rows), ds.floors(rows))
    readme = [report.Row("readme demo", "one process", 1, 10, repeats=3, median_s=0.040, spread_s=0.0, identical="yes"),
              report.Row("tiny run", ds.OWN_ROUND_TRIP, 2, 0, repeats=3, median_s=0.010, spread_s=0.0, identical="yes")]
    assert ds.floors(readme) == {"readme demo": pytest.approx(1.25)}
