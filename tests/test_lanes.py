"""Host lanes (eagle.lanes): the laned host entry gives the bits of the one-at-a-time entry.

The reference is ``HostEntry(plugin, lanes=1)``: the same generated module without the lane
transform; the laned entry is ``HostEntry(plugin, simd=False)`` (the vectorised loop, which the
host entry takes where it can, is tested in ``tests/test_simd.py``).  Every kernel of the core
suite and the kernels below (per-sample ``while`` loops with
different trip counts per lane, nested per-sample ``if``/``else``, ``break``/``continue``, integer
arithmetic, vector planes, cells) is run at partitions whose bases are not multiples of the lane
count and at sample counts that are not multiples of it; results and cell row partials must match
bit for bit.  Kernels the transform cannot handle must run one at a time and say why.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import eagle
import eagle.interrupt
from eagle import Cell, In, Out, Param
from eagle.exec import HostTeam
from eagle.host import HostEntry
from eagle.lanes import ENV, choose
from tests.kernels import CASES, as_dict, inputs, same_bits

LIMIT = 7.0


@eagle.kernel
def collatz(i, k: In, steps: Out["int64"], top: Out["int64"], ends: Out):
    """A per-sample while with very different trip counts per lane, continue and while-else."""
    v = k[i]
    c = 0
    t = v
    e = 0.0
    while v != 1:
        c += 1
        if v % 2 == 0:
            v = v // 2
            continue
        v = 3 * v + 1
        if v > t:
            t = v
    else:
        e = c * 0.25 + 1.0
    steps[i] = c
    top[i] = t
    ends[i] = e


@eagle.kernel
def branches(i, x: In, lim: Param, y: Out, z: Out):
    """Nested if/elif/else on per-sample values, a reassigned Param, a uniform local."""
    v = x[i]
    n = x.shape[0]
    half = n // 2
    lim = lim * 0.5
    if v < -2.5:
        lim = lim + v             # now a per-lane copy of the Param
    if v > 0.0:
        if v > lim:
            w = math.log(v) * LIMIT
        elif v > 0.25:
            w = v * v - 1.0 / 3.0
        else:
            w = -v
            if i < half:
                w = w * 3.0
    else:
        w = math.exp(v) if v > -1.0 else math.cos(v) + 0.1
    y[i] = w
    z[i] = w * v + half


@eagle.kernel
def breaks(i, x: In, steps: Param, y: Out, found: Out["int64"]):
    """break in a per-sample while, in a uniform loop (made per lane), in a per-sample-bound for."""
    v = x[i]
    acc = 0.0
    while True:
        acc += v
        v = v * 0.75 + 0.01
        if v < 0.05:
            break
    hit = -1
    for k in range(steps):
        acc = acc * 1.0001 + k
        if acc > 500.0 + 200.0 * x[i]:
            hit = k
            break
    m = int(x[i] * 10.0) + 1
    for k in range(m):
        if k * k > m:
            break
        acc -= k * 0.5
    else:
        acc += 1.0
    y[i] = acc
    found[i] = hit


@eagle.kernel
def intmath(i, k: In, a: Param, y: Out["int64"], r: Out):
    """Integer arithmetic (floor division, modulo, shifts, xor) with a per-sample loop."""
    v = k[i]
    s = 0
    for j in range(abs(v) % 17):
        s = (s * 31 + (v ^ j)) % 1000003
        s += (v >> 2) // (j + 1)
    y[i] = s * a - (v << 1)
    r[i] = s / (abs(v) + 1)


@eagle.kernel
def rotate(i, p: In, angle: Param, q: Out[3], steps: Param):
    """A vector plane in and out, a uniform loop around a per-lane local array."""
    c, s = math.cos(angle), math.sin(angle)
    buf = np.empty(3)
    for k in range(3):
        buf[k] = p[i, k]
    for _ in range(steps):
        x0 = c * buf[0] - s * buf[1]
        buf[1] = s * buf[0] + c * buf[1]
        buf[0] = x0
        buf[2] = buf[2] * 0.999 + 1e-3
    for k in range(3):
        q[i, k] = buf[k]


@eagle.kernel
def cell_loops(i, x: In, tol: Param, total: Cell["sum"], hi: Cell["max"], prod: Cell["times"]):
    """Cells written after a per-sample while."""
    v = abs(x[i]) * 100.0 + 1.0
    n = 0
    while v > tol:
        v = math.sqrt(v) * 0.9
        n += 1
    total[i] = v * n
    hi[i] = v - n
    prod[i] = 1.0 + v * 1e-3


@eagle.kernel(fma=True)
def fused(i, x: In, a: Param, b: Param, steps: Param, y: Out):
    """fma=True: contraction allowed (bits may differ from numpy, not between runs)."""
    v = x[i]
    for _ in range(steps):
        v = a * v + b
    y[i] = a * x[i] + b + v * 1e-3


@eagle.kernel
def early(i, x: In, y: Out):
    if x[i] < 0.0:
        y[i] = 0.0
        return
    y[i] = x[i] * 2.0


EXTRA = {
    "collatz": (collatz, lambda n, r: {"k": r.integers(1, 3000, n)}),
    "branches": (branches, lambda n, r: {"x": r.uniform(-3.0, 3.0, n), "lim": 3.0}),
    "breaks": (breaks, lambda n, r: {"x": r.uniform(0.0, 3.0, n), "steps": 40}),
    "intmath": (intmath, lambda n, r: {"k": r.integers(-5000, 5000, n), "a": 7}),
    "rotate": (rotate, lambda n, r: {"p": r.normal(size=(n, 3)), "angle": 0.3, "steps": 25}),
    "cell_loops": (cell_loops, lambda n, r: {"x": r.uniform(-3.0, 3.0, n), "tol": 1.5}),
    "fused": (fused, lambda n, r: {"x": r.uniform(-1.0, 1.0, n), "a": 0.999, "b": 1e-3, "steps": 30}),
}


def kernel_of(name):
    return CASES[name][0] if name in CASES else EXTRA[name][0]


def planes_of(name, n):
    if name in CASES:
        return inputs(name, n)
    return EXTRA[name][1](n, np.random.default_rng(777))


def parts_of(plugin, n):
    """Partitions of [0, n) with bases that are not multiples of 8 (rows of 32 for cells)."""
    if plugin.cells:
        cuts = [0, min(n, 64), min(n, 160), n]
    else:
        cuts = [0, min(n, 13), min(n, 13 + 45), min(n, 13 + 45 + 3), n]
    return [(a, b - a) for a, b in zip(cuts, cuts[1:])]


def run_with(entry, name, n, threads=None):
    """The plan's result and the cells' row partials, each partition run by ``entry``."""
    p = entry.plugin
    pl = eagle.plan.plan(p, structure=HostTeam, partitions=parts_of(p, n))
    bound = pl.bind(planes_of(name, n))
    got = [entry.run(bound.values, q.base, q.stop, threads=threads) for q in pl.partitions_for(n)]
    rows = {c: np.concatenate([g[c] for g in got]) for c in p.cells}
    return as_dict(p, pl.result(bound, rows)), rows


LANED = [n for n in CASES if n not in ("histogram",)] + list(EXTRA)


@pytest.mark.parametrize("name", LANED)
@pytest.mark.parametrize("n", [203, 8, 5, 0])
def test_laned_bits_equal_one_at_a_time(name, n):
    p = eagle.deploy(kernel_of(name))
    assert p.host_path != "one", p.host_lanes_reason
    assert p.host_lanes_reason is None
    entry = HostEntry(p, simd=False)
    assert entry.path == "lanes" and entry.lanes_reason is None, entry.lanes_reason
    laned, laned_rows = run_with(entry, name, n)
    ref, ref_rows = run_with(HostEntry(p, lanes=1), name, n)
    assert entry.lanes > 1, entry.lanes_reason            # still laned once compiled
    assert same_bits(laned, ref)
    assert same_bits(laned_rows, ref_rows)


@pytest.mark.parametrize("name", ["oscillator", "collatz", "branches", "cell_loops", "stencil"])
def test_laned_threads_and_plan(name):
    """Several chunks per thread team (chunk bounds not multiples of L), and the plan path itself."""
    p = eagle.deploy(kernel_of(name))
    n = 4999
    ref, ref_rows = run_with(HostEntry(p, lanes=1), name, n, threads=1)
    laned, laned_rows = run_with(HostEntry(p, simd=False), name, n, threads=2)
    assert same_bits(laned, ref) and same_bits(laned_rows, ref_rows)
    out = eagle.plan.plan(p, structure=HostTeam, npartitions=3).run(**planes_of(name, n))
    assert same_bits(as_dict(p, out), ref)


@pytest.mark.parametrize("lanes,name", [(2, "breaks"), (2, "collatz"), (2, "reductions"), (8, "oscillator"),
                                        (16, "oscillator"), (16, "halvings")])
def test_other_lane_counts(lanes, name):
    p = eagle.deploy(kernel_of(name))
    e = HostEntry(p, lanes=lanes)
    (laned, laned_rows), (ref, ref_rows) = run_with(e, name, 101), run_with(HostEntry(p, lanes=1), name, 101)
    assert e.lanes == lanes
    assert same_bits(laned, ref) and same_bits(laned_rows, ref_rows)


def test_numpy_references_still_hold():
    """The laned entry against numpy where the suite has an exact reference."""
    for name, (k, _, ref) in CASES.items():
        if ref is None:
            continue
        d = inputs(name, 301)
        out = as_dict(eagle.deploy(k), eagle.plan.plan(k, structure=HostTeam).run(**inputs(name, 301)))
        want = ref(d)
        assert same_bits({o: out[o] for o in want}, want), name


def laned_asm(plugin, name):
    """Machine code of the plugin's laned body, compiled afresh (cached code cannot be inspected)."""
    import numba
    from eagle.codegen import jit_options
    opts = eval(f"dict({jit_options(plugin)})")
    opts["cache"] = False
    fn = numba.njit(**opts)(HostEntry(plugin, simd=False).module._eagle_body_lanes.py_func)
    bound = eagle.bind.bind(plugin, planes_of(name, 16))
    fn(0, *[np.zeros(32) if a in plugin.cells else bound.values[a] for _, a in plugin.arg_spec],
       eagle.bounds.new_record()[0], 0, 0, eagle.interrupt.new_progress())
    return fn.inspect_asm(fn.signatures[0])


def test_no_contraction_in_laned_code():
    """Without fma=True the laned code has no fused multiply-add; with fma=True it does (so the
    check can see one), and the laned bits still equal the one-at-a-time bits (tested above)."""
    fma = ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub")
    for name in ("oscillator", "axpb", "branches", "halvings"):
        asm = laned_asm(eagle.deploy(kernel_of(name)), name)
        assert "mulsd" in asm and not any(f in asm for f in fma), name
    f = eagle.deploy(fused)
    assert f.fma and HostEntry(f, simd=False).lanes > 1
    assert any(op in laned_asm(f, "fused") for op in fma)


def test_fallback_cross_sample_write():
    p = eagle.deploy(CASES["histogram"][0])
    assert p.host_lanes == 1
    assert "cross_sample_write" in p.host_lanes_reason
    d = inputs("histogram", 500)
    out = eagle.plan.plan(p, structure=HostTeam).run(**d)
    assert same_bits(out, CASES["histogram"][2](d)["counts"])


def test_fallback_raise():
    from tests.kernels import picky
    p = eagle.deploy(picky)
    assert p.host_lanes == 1 and "raises" in p.host_lanes_reason
    with pytest.raises(ValueError, match="negative input"):
        eagle.plan.plan(p, structure=HostTeam).run(x=np.array([1.0, 4.0, -1.0]))


def test_fallback_early_return():
    p = eagle.deploy(early)
    assert p.host_lanes == 1 and "returns before its end" in p.host_lanes_reason
    x = np.linspace(-1.0, 1.0, 41)
    assert same_bits(eagle.plan.plan(p, structure=HostTeam).run(x=x), np.where(x < 0.0, 0.0, x * 2.0))


def test_env_forces_one_at_a_time(monkeypatch):
    p = eagle.deploy(kernel_of("oscillator"))
    monkeypatch.setenv(ENV, "1")
    e = HostEntry(p)
    assert e.lanes == 1 and ENV in e.lanes_reason
    assert "_eagle_body_lanes" not in e.source
    monkeypatch.setenv(ENV, "4")
    assert HostEntry(p).lanes == 4
    monkeypatch.setenv(ENV, "3")
    with pytest.raises(ValueError, match=ENV):
        choose(p)


def test_fallback_when_the_laned_body_does_not_compile(monkeypatch):
    """A laned body numba rejects (here: one calling an undefined name) falls back, visibly."""
    import eagle.host_codegen as host_codegen
    real = host_codegen.lanes_function
    monkeypatch.setattr(host_codegen, "lanes_function",
                        lambda plugin, n: real(plugin, n).replace(":", ":\n    _eagle_no_such_name()", 1))
    p = eagle.deploy(kernel_of("branches"))
    e = HostEntry(p, lanes=8)
    assert e.lanes == 8 and "_eagle_no_such_name" in e.source
    got, _ = run_with(e, "branches", 50)
    assert e.lanes == 1 and "did not compile" in e.lanes_reason
    assert "_eagle_no_such_name" not in e.source
    assert same_bits(got, run_with(HostEntry(p, lanes=1), "branches", 50)[0])
