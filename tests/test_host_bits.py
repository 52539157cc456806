"""HostTeam bit identity: every core kernel, every split, every thread team, the same bits.

The reference is one partition run by one thread; where ``tests.kernels.CASES`` has an exact
numpy reference the outputs must equal it bit for bit too.  Every run is watched chunk by chunk
(a spy on the entry's compiled ``loop``): each sample runs in exactly one chunk, chunks of a
kernel with cells start on rows, one thread runs each partition as one chunk, and a team of 2
or 3 threads really cuts every splittable case of 8 samples or more (33 or more with cells)
into several chunks, run by the team's threads.  The second half checks what a run returns:
bare outputs, dicts in argument order, cells as float64, supplied outputs in place.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import Cell, In, Out, Param
from eagle import plan as eplan
from tests import reference as ref
from tests.kernels import CASES, SPLITTABLE, as_dict, inputs, same_bits

SMALL = [0, 1, 31, 33, 100]
BIG = 1_000_003
BIG_CASES = ["axpb", "transcendental", "reductions"]
THREADS = [1, 2, 3]
NPARTITIONS = [1, 2, 3, 7]
#: the team fixture's chunks: from this many samples a team of 2 or 3 threads runs several chunks
CUT_FROM = 8
CUT_FROM_ROWS = 33          # two rows: a kernel with cells is cut in whole rows

_REFERENCE = {}


def run(name, n, **how):
    """Case ``name`` over ``n`` samples on HostTeam, as a dict by output name."""
    plugin = eagle.deploy(CASES[name][0])
    return as_dict(plugin, eplan.plan(plugin, structure=eexec.HostTeam, **how).run(**inputs(name, n)))


def reference(name, n, monkeypatch):
    """One partition, one thread (computed once per case and size)."""
    if (name, n) not in _REFERENCE:
        with monkeypatch.context() as m:
            m.setenv("EAGLE_NUM_THREADS", "1")
            _REFERENCE[name, n] = run(name, n)
    return _REFERENCE[name, n]


def odd_partitions(n):
    """Explicit partitions of ``n`` samples starting at odd offsets (0, 1, 7, ~n/3, ~2n/3)."""
    bases = sorted({0, *(b for b in (1, 7, (n // 3) | 1, (2 * n // 3) | 1) if b <= n)})
    return [(b, e - b) for b, e in zip(bases, bases[1:] + [n])]


def row_partitions(n):
    """Explicit partitions of ``n`` samples starting at multiples of 32 (for kernels with cells)."""
    bases = sorted({0, *(b for b in (32, 96, (n // 3) // 32 * 32) if b <= n)})
    return [(b, e - b) for b, e in zip(bases, bases[1:] + [n])]


def check_against_numpy(name, n, got):
    numpy_reference = CASES[name][2]
    if numpy_reference is None:
        return
    want = numpy_reference(inputs(name, n))
    for key, value in want.items():
        assert same_bits(got[key], value), f"{name}, n={n}: {key!r} differs from the numpy reference"


def spy_chunks(name, monkeypatch):
    """A list that gets ``(thread, start, stop)`` of every non-empty chunk case ``name`` runs."""
    entry = eagle.host.host_entry(eagle.deploy(CASES[name][0]))
    seen = []
    original = entry.loop

    def spy(a, b, *args):
        if b > a:
            seen.append((threading.current_thread(), a, b))
        return original(a, b, *args)
    monkeypatch.setattr(entry, "loop", spy)
    return seen


def must_cut(plugin, name, n, threads):
    """Whether a team of ``threads`` must run one partition of ``n`` samples as several chunks."""
    if threads < 2 or name not in SPLITTABLE:
        return False
    return n >= (CUT_FROM_ROWS if plugin.cells else CUT_FROM)


def check_chunks(name, n, threads, parts, chunks):
    """Every sample in one chunk; rows whole; one thread: one chunk per partition, run by the team
    (this thread only waits, where Ctrl-C reaches it);
    a team: the whole run (one partition) cut into several chunks where ``must_cut``, on the team.
    Returns whether some partition was cut into several chunks."""
    plugin = eagle.deploy(CASES[name][0])
    where = f"{name}, n={n}, {threads} threads, partitions {parts}"
    spans = sorted((a, b) for _, a, b in chunks)
    once = (spans[0][0] == 0 and spans[-1][1] == n and all(b == a for (_, b), (a, _) in zip(spans, spans[1:]))
            if spans else n == 0)
    assert once, f"{where}: chunks {spans} do not run each sample once"
    if plugin.cells:
        assert all(a % 32 == 0 for a, _ in spans), f"{where}: a chunk {spans} starts off a row"
    filled = sum(1 for _, c in parts if c)
    if threads == 1 or name not in SPLITTABLE:
        assert len(spans) == filled, f"{where}: {spans}"
        assert all(t.name.startswith("eagle-team") for t, _, _ in chunks), f"{where}: not run by the team"
    if len(parts) == 1 and must_cut(plugin, name, n, threads):
        assert len(spans) > 1, f"{where}: one chunk {spans}"
        assert all(t.name.startswith("eagle-team") for t, _, _ in chunks), f"{where}: not run by the team"
    return len(spans) > filled


def check_every_split(name, n, threads, team, monkeypatch):
    want = reference(name, n, monkeypatch)
    check_against_numpy(name, n, want)
    team(threads)
    plugin = eagle.deploy(CASES[name][0])
    chunks = spy_chunks(name, monkeypatch)
    counts = NPARTITIONS if name in SPLITTABLE else [1]
    cut = False
    for k in counts:
        del chunks[:]
        assert same_bits(run(name, n, npartitions=k), want), f"{name}, n={n}, {threads} threads, {k} partitions"
        split = [(a, b - a) for a, b in ref.cut(n, k, rows=bool(plugin.cells))]
        cut |= check_chunks(name, n, threads, split, chunks)
    if name not in SPLITTABLE:
        parts = [(0, n)]
    elif plugin.cells:
        parts = row_partitions(n)
    else:
        parts = odd_partitions(n)
    del chunks[:]
    assert same_bits(run(name, n, partitions=parts), want), f"{name}, n={n}, {threads} threads, {parts}"
    cut |= check_chunks(name, n, threads, parts, chunks)
    return cut


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("n", SMALL)
@pytest.mark.parametrize("name", list(CASES))
def test_same_bits_at_every_split(name, n, threads, team, monkeypatch):
    cut = check_every_split(name, n, threads, team, monkeypatch)
    assert cut == must_cut(eagle.deploy(CASES[name][0]), name, n, threads), "cut where it need not be"


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("name", BIG_CASES)
def test_same_bits_over_a_million_samples(name, threads, team, monkeypatch):
    assert check_every_split(name, BIG, threads, team, monkeypatch) == (threads > 1)


def test_the_suite_has_every_kind_of_kernel():
    """The bit-identity runs above cover every access class and exp, sin, log, sqrt and integer inputs."""
    accesses = {eagle.deploy(k).exec_access for k, _, _ in CASES.values()}
    assert accesses == {"sample_local", "cross_sample_read", "cross_sample_write", "mapreduce"}
    source = "".join(eagle.deploy(k).source for k, _, _ in CASES.values())
    for fn in ("math.exp", "math.sin", "math.log", "math.sqrt"):
        assert fn in source
    assert inputs("integers", 5)["k"].dtype == np.int64


def test_odd_partitions_really_start_at_odd_offsets():
    assert odd_partitions(33) == [(0, 1), (1, 6), (7, 4), (11, 12), (23, 10)]
    assert odd_partitions(0) == [(0, 0)]
    assert all(b % 2 == 1 for b, _ in odd_partitions(BIG)[1:])


def test_threads_really_cut_the_samples_into_chunks(team, monkeypatch):
    """With the team fixture a few hundred samples are several chunks, run on several threads."""
    import threading
    team(3)
    names = set()
    entry = eagle.host.host_entry(eagle.deploy(CASES["axpb"][0]))
    original = entry.loop

    def spy(a, b, *args):
        if b > a:
            names.add((threading.current_thread().name, a, b))
        return original(a, b, *args)
    monkeypatch.setattr(entry, "loop", spy)
    run("axpb", 500)
    assert len({(a, b) for _, a, b in names}) > 1
    assert all(name.startswith("eagle-team") for name, _, _ in names)


def test_a_cell_kernel_split_off_row_boundaries_is_refused_by_the_plan():
    with pytest.raises(ValueError, match=r"kernel 'reductions' writes cells.*multiple of 32.*\(33, 67\)"):
        eplan.plan(eagle.deploy(CASES["reductions"][0]), structure=eexec.HostTeam, partitions=[(0, 33), (33, 67)])


# --- what a run returns -----------------------------------------------------------------------

@eagle.kernel
def scaled(i, x: In, y: Out, factor: Param = 2.0, shift: Param = -1):
    y[i] = x[i] * factor + shift


@eagle.kernel
def mean_parts(i, x: In, total: Cell["sum"]):
    total[i] = x[i]


def host(kernel, **how):
    return eplan.plan(eagle.deploy(kernel), structure=eexec.HostTeam, **how)


def test_a_single_output_is_returned_bare():
    x = np.linspace(-1, 1, 9)
    y = host(CASES["axpb"][0]).run(x=x, a=2.5, b=-1.25)
    assert type(y) is np.ndarray and y.dtype == np.float64 and y.shape == (9,)
    assert same_bits(y, 2.5 * x - 1.25)


def test_several_outputs_come_as_a_dict_in_argument_order():
    out = host(CASES["halvings"][0]).run(**inputs("halvings", 40))
    assert list(out) == ["count", "rest"]
    out = host(CASES["oscillator"][0]).run(**inputs("oscillator", 40))
    assert list(out) == ["x", "v", "energy"]
    out = host(CASES["reductions"][0]).run(**inputs("reductions", 40))
    assert list(out) == ["total", "prod", "hi", "lo", "positive"]


def test_cells_are_float64_scalars():
    out = host(CASES["reductions"][0]).run(**inputs("reductions", 70))
    for name, value in out.items():
        assert type(value) is np.float64, name
    x = np.arange(10.0)
    total = host(mean_parts).run(x=x)
    assert type(total) is np.float64 and total == 45.0
    energy = host(CASES["oscillator"][0]).run(**inputs("oscillator", 5))["energy"]
    assert type(energy) is np.float64


def test_supplied_outputs_are_written_in_place_and_returned():
    x = np.arange(7.0)
    y = np.full(7, np.nan)
    got = host(CASES["axpb"][0]).run(x=x, a=2.0, b=1.0, y=y)
    assert got is y
    assert same_bits(y, 2.0 * x + 1.0)
    d = inputs("oscillator", 50)
    xs, vs = d["x"], d["v"]
    out = host(CASES["oscillator"][0]).run(**d)
    assert out["x"] is xs and out["v"] is vs
    assert not np.all(xs == 1.0) and not np.all(vs == 0.0)
    q = np.zeros((6, 3))
    out = host(CASES["vectors"][0]).run(p=np.ones((6, 3)), scale=2.0, q=q)
    assert out["q"] is q and same_bits(q, np.ones((6, 3)) * 2.0 + np.arange(3.0))


def test_params_take_their_defaults_from_the_signature():
    x = np.arange(5.0)
    assert same_bits(host(scaled).run(x=x), x * 2.0 + -1)
    assert same_bits(host(scaled).run(x=x, factor=3.0), x * 3.0 + -1)
    assert same_bits(host(scaled).run(x=x, shift=0.5, factor=0.25), x * 0.25 + 0.5)


def test_vector_outputs_have_their_declared_width():
    d = inputs("vectors", 11)
    out = host(CASES["vectors"][0]).run(**d)
    assert out["q"].shape == (11, 3) and out["q"].dtype == np.float64
    assert same_bits(out["norm"], np.array([np.sqrt(sum(p * p for p in row)) for row in d["p"]]))


def test_int64_outputs():
    k = np.array([-3, -2, -1, 0, 1, 2, 5], dtype=np.int64)
    out = host(CASES["integers"][0]).run(k=k)
    assert out["parity"].dtype == np.int64 and out["y"].dtype == np.float64
    assert same_bits(out["parity"], k % 2)
    assert same_bits(out["y"], (3 * k + 1).astype(np.float64))
    supplied = np.zeros(7, dtype=np.int64)
    assert host(CASES["integers"][0]).run(k=k, parity=supplied)["parity"] is supplied
