"""Tables: a read-only array shared by every sample, on every structure, with the bits of numpy.

A piecewise-linear interpolation over a table (np.interp's formula: bit for bit) and a 2-D
coefficient table (Horner, against plain per-sample Python) on HostTeam at 1/2/3 partitions,
RankPartition under ``mpiexec -n 2``, DeviceKernel under the CUDA simulator, and Dask in the
numpy and the lazy mode; a table index out of range raises on each, naming the table, the
kernel and the sample; a write is refused at deploy; tables reused by Dask runs are sent once.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import In, Out, Param, Table, plan as eplan
from tests import launch
from tests.table_kernels import data, interp, interp_reference, lookup, poly2d, poly2d_reference

SCRIPT = os.path.join(launch.ROOT, "tests", "mpi_scripts", "tables.py")
OUT_OF_RANGE = (5, "past the end"), (-1, "negative")


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture(scope="module")
def refs():
    a, b = data(1001)
    return a, b, interp_reference(**a), poly2d_reference(**b)


def assert_out_of_range(message, shift):
    """The message names the table, an index the run really met (k + shift outside [0, 8)), the
    kernel and the sample."""
    m = re.search(r"index (-?\d+) is out of range for table 't', whose axis 0 has 8 entries", message)
    assert m, message
    index = int(m.group(1))
    assert (index >= 8 if shift > 0 else index < 0) and index - shift in range(8), message
    assert "kernel 'lookup'" in message and "sample" in message, message


# -- in this process -----------------------------------------------------------------------------

@pytest.mark.parametrize("parts", [1, 2, 3])
def test_host_team_same_bits_as_numpy(parts, refs):
    a, b, y, z = refs
    assert same(eplan.plan(interp, structure=eexec.HostTeam, npartitions=parts).run(**a), y)
    assert same(eplan.plan(poly2d, structure=eexec.HostTeam, npartitions=parts).run(**b), z)


@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("shift,what", OUT_OF_RANGE)
def test_host_team_table_index_out_of_range_raises(parts, shift, what):
    p = eplan.plan(lookup, structure=eexec.HostTeam, npartitions=parts)
    with pytest.raises(IndexError) as e:
        p.run(k=np.arange(40, dtype=np.int64) % 8, t=np.arange(8.0), shift=shift)
    assert_out_of_range(str(e.value), shift)


def test_table_at_the_sample_index_is_checked():
    """t[i] on a table shorter than the run is an error, never a read past its end."""
    @eagle.kernel
    def own(i, x: In, t: Table, y: Out):
        y[i] = x[i] + t[i]

    p = eplan.plan(own, structure=eexec.HostTeam)
    assert same(p.run(x=np.ones(4), t=np.arange(4.0)), np.arange(4.0) + 1)
    with pytest.raises(IndexError, match=r"index 4 is out of range for table 't'.*kernel 'own', sample 4"):
        p.run(x=np.ones(6), t=np.arange(4.0))


@pytest.mark.parametrize("body,rule", [
    ("t[k[i]] = 1.0", "writes Table 't'"),
    ("t[0] += y[i]", "writes Table 't'"),
    ("t = k", "'t' is a Table, which is read-only"),
    ("y[i] = helper(t)", "uses Table 't' in a way eagle cannot check"),
    ("y[i] = sum(t[0:2])", "slices Table 't'"),
])
def test_table_write_or_opaque_use_refused_at_deploy(body, rule, tmp_path):
    src = (f"import eagle\nfrom eagle import In, Out, Table\n\ndef helper(a):\n    return a[0]\n\n"
           f"@eagle.kernel\ndef writer(i, k: In, t: Table, y: Out):\n    {body}\n")
    path = tmp_path / "writer_mod.py"
    path.write_text(src)
    ns = {}
    sys.path.insert(0, str(tmp_path))
    try:
        exec(compile(src, str(path), "exec"), ns)
    finally:
        sys.path.remove(str(tmp_path))
    with pytest.raises(ValueError, match=rf"kernel 'writer', line 9: .*{rule}"):
        eagle.deploy(ns["writer"])


def test_table_refusals_at_bind_name_the_table():
    @eagle.kernel
    def typed(i, x: In, t: Table["int64"], y: Out):
        y[i] = x[i] * t[0, 1]

    p = eplan.plan(typed, structure=eexec.HostTeam)
    with pytest.raises(TypeError, match=r"Table 't' of kernel 'typed' is float64, but the kernel declares it "
                                        r"Table\['int64'\]"):
        p.run(x=np.ones(3), t=np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"Table 't' of kernel 'typed' has 1 dimension.*2 index"):
        p.run(x=np.ones(3), t=np.ones(4, dtype=np.int64))
    with pytest.raises(ValueError, match=r"Table 't' of kernel 'typed' is 0-d"):
        p.run(x=np.ones(3), t=np.array(2, dtype=np.int64))
    with pytest.raises(TypeError, match=r"missing Table 't'"):
        p.run(x=np.ones(3))
    got = p.run(x=np.arange(3.0), t=np.array([[1, 5], [2, 3]], dtype=np.int64))
    assert same(got, np.arange(3.0) * 5)


@pytest.mark.parametrize("dtype,advice", [("float16", "float32"), (">f8", "float64"), ("U3", None)])
def test_table_dtype_compiled_code_cannot_read_refused(dtype, advice, no_launch):
    """The plane dtype rule (eagle.roles.dtype_problem) holds for tables too, named as a Table."""
    p = eplan.plan(lookup, structure=eexec.HostTeam)
    t = np.zeros(8, dtype=dtype)
    with pytest.raises(TypeError, match=rf"Table 't' of kernel 'lookup' holds") as e:
        p.run(k=np.zeros(4, dtype=np.int64), t=t, shift=0)
    if advice:
        assert f"astype({advice!r})" in str(e.value)


def test_table_is_not_a_sample_count_and_is_never_written():
    a, _ = data(50)
    xs, ys = a["xs"].copy(), a["ys"].copy()
    out = eplan.plan(interp, structure=eexec.HostTeam, npartitions=3).run(**a)
    assert out.shape == (50,)
    assert same(a["xs"], xs) and same(a["ys"], ys)


def test_table_role_in_manifest_and_artifact(tmp_path):
    @eagle.kernel
    def typed2(i, x: In, t: Table["int32"], y: Out):
        y[i] = x[i] + t[1]

    plugin = eagle.deploy(typed2)
    assert plugin.manifest["schema"] == 3
    assert {"name": "t", "kind": "Table", "width": None, "dtype": "int32", "op": None} in plugin.manifest["arg_spec"]
    assert plugin.tables == {"t": [1]}
    assert plugin.exec_access == "sample_local" and "t" not in plugin.sliceable
    plugin.save(tmp_path / "art")
    back = eagle.load(tmp_path / "art")
    assert back.roles["t"] == Table["int32"]
    got = eplan.plan(back, structure=eexec.HostTeam).run(x=np.ones(3), t=np.array([0, 4], dtype=np.int32))
    assert same(got, np.full(3, 5.0))


def test_table_role_repr_and_refused_subscripts():
    assert repr(Table["int64"]) == "Table['int64']" and repr(Table) == "Table"
    with pytest.raises(TypeError, match="a table holds numbers"):
        Table["U3"]
    with pytest.raises(TypeError, match="takes no subscript"):
        Table["int64"]["int32"]


# -- other processes: MPI ranks, the CUDA simulator ----------------------------------------------

def _records(out, ranks):
    got = []
    for r in range(ranks):
        rec = json.loads((out / f"rank{r}.json").read_text())
        with np.load(out / f"rank{r}.npz") as z:
            rec["arrays"] = {k: z[k] for k in z.files}
        got.append(rec)
    return got


def _judge(rec, labels, refs):
    _, _, y, z = refs
    for label in labels:
        assert same(rec["arrays"][f"{label}-interp"], y), label
        assert same(rec["arrays"][f"{label}-poly2d"], z), label
        for shift, what in OUT_OF_RANGE:
            err = rec[f"{label}-{what}"]
            assert err is not None and err["type"] == "IndexError", (label, what, err)
            assert_out_of_range(err["message"], shift)


def test_rank_partition_two_ranks_same_bits_and_errors(tmp_path, refs):
    out = tmp_path / "mpi"
    out.mkdir()
    launch.mpiexec(2, [SCRIPT, str(out), "mpi"], timeout=300)
    for rec in _records(out, 2):            # every rank returns the whole planes, and every rank raises
        _judge(rec, ["ranks"], refs)


def test_cuda_simulator_same_bits_and_errors(tmp_path, refs):
    out = tmp_path / "device"
    out.mkdir()
    env = dict(os.environ, PYTHONPATH=launch.ROOT + os.pathsep + os.path.join(launch.ROOT, "tests", "mpi_scripts"),
               NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, SCRIPT, str(out), "device"], cwd=launch.ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [rec] = _records(out, 1)
    _judge(rec, ["device1", "device2", "device3"], refs)


# -- Dask: numpy mode (tables kept on the workers) and lazy mode -----------------------------------

@pytest.fixture(scope="module")
def client():
    pytest.importorskip("distributed")
    with launch.local_client(2) as c:
        yield c


def _dask(client):
    import eagle_dask
    return eagle_dask.DaskPartition.on(client, progress=False)


def test_dask_numpy_mode_same_bits_and_tables_sent_once(client, refs):
    from eagle_dask.tables import store_of
    a, b, y, z = refs
    store = store_of(client)
    p = eplan.plan(interp, structure=_dask(client))
    before = store.sent
    assert same(p.run(**a), y)
    assert store.sent == before + 2                  # xs and ys
    assert same(p.run(**{**a, "xs": a["xs"].copy(), "ys": a["ys"].copy()}), y)     # equal bytes, new arrays
    assert store.sent == before + 2
    assert same(eplan.plan(poly2d, structure=_dask(client)).run(**b), z)


def test_dask_table_edited_in_place_is_sent_again(client):
    from eagle_dask.tables import store_of
    xs = np.linspace(0.0, 1.0, 1000)
    a = dict(x=np.random.default_rng(3).random(300), xs=xs, ys=np.sin(xs * 5.0))
    p = eplan.plan(interp, structure=_dask(client))
    assert same(p.run(**a), interp_reference(**a))
    sent = store_of(client).sent
    a["ys"][5] += 1.0            # same array object, one entry changed (not one the fingerprint reads)
    a["x"][:3] = xs[4:7]          # samples that read it
    assert same(p.run(**a), interp_reference(**a))
    assert store_of(client).sent == sent + 1


def test_dask_kept_table_lost_with_the_workers_is_sent_again(client):
    """A restart drops what the workers held: the next run finds its kept table lost and sends it."""
    from eagle_dask.tables import store_of
    a, _ = data(200, seed=9)
    p = eplan.plan(interp, structure=_dask(client))
    assert same(p.run(**a), interp_reference(**a))
    sent = store_of(client).sent
    client.restart(timeout=120)
    client.wait_for_workers(2, timeout=120)
    assert same(p.run(**a), interp_reference(**a))
    assert store_of(client).sent == sent + 2


@pytest.mark.parametrize("shift,what", OUT_OF_RANGE)
def test_dask_table_index_out_of_range_raises(client, shift, what):
    p = eplan.plan(lookup, structure=_dask(client))
    with pytest.raises(IndexError) as e:
        p.run(k=np.arange(40, dtype=np.int64) % 8, t=np.arange(8.0), shift=shift)
    assert_out_of_range(str(e.value), shift)


def test_dask_lazy_mode_numpy_and_dask_tables(client, refs):
    import dask.array as da
    a, b, y, z = refs
    # blocks at the input's chunks (min_block=1), and joined into one (the default min_block)
    import eagle_dask
    for min_block, chunks in ((1, (300, 300, 300, 101)), (None, (1001,))):
        p = eplan.plan(interp, structure=eagle_dask.DaskPartition.on(client, progress=False, min_block=min_block))
        lazy = p.run(x=da.from_array(a["x"], chunks=300), xs=a["xs"], ys=da.from_array(a["ys"], chunks=10))
        assert isinstance(lazy, da.Array) and lazy.chunks == (chunks,)
        assert same(lazy.compute(), y)
    zz = eplan.plan(poly2d, structure=_dask(client)).run(
        u=da.from_array(b["u"], chunks=200), v=b["v"], c=da.from_array(b["c"], chunks=(2, 2)))
    assert same(zz.compute(), z)


@pytest.mark.parametrize("shift,what", OUT_OF_RANGE)
def test_dask_lazy_table_index_out_of_range_raises(client, shift, what):
    import dask.array as da
    p = eplan.plan(lookup, structure=_dask(client))
    lazy = p.run(k=da.from_array(np.arange(40, dtype=np.int64) % 8, chunks=16), t=np.arange(8.0), shift=shift)
    with pytest.raises(IndexError) as e:
        lazy.compute()
    assert_out_of_range(str(e.value), shift)


# -- a real GPU (skipped elsewhere) ----------------------------------------------------------------

def _gpu():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu(), reason="needs an NVIDIA GPU with CuPy")
@pytest.mark.parametrize("parts", [1, 3])
def test_gpu_cupy_table_stays_on_the_device(parts, refs):
    import cupy
    a, b, y, z = refs
    p = eplan.plan(interp, structure=eexec.DeviceKernel, npartitions=parts)
    got = p.run(x=cupy.asarray(a["x"]), xs=cupy.asarray(a["xs"]), ys=cupy.asarray(a["ys"]))
    assert same(cupy.asnumpy(got), y)             # + - * / only, no contraction: numpy's bits
    got = p.run(x=a["x"], xs=cupy.asarray(a["xs"]), ys=a["ys"])     # a device table beside host planes
    assert same(got.get() if hasattr(got, "get") else got, y)
    with pytest.raises(IndexError, match=r"out of range for table 't'.*kernel 'lookup'"):
        eplan.plan(lookup, structure=eexec.DeviceKernel, npartitions=parts).run(
            k=cupy.arange(40) % 8, t=cupy.arange(8.0), shift=5)
