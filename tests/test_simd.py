"""Host SIMD (eagle.simd): the vectorised host loop gives the bits of one sample at a time.

The reference is independent of eagle's engines: the kernel's body run in Python for one sample
after the other (``tests.reference.per_sample``), its cells folded by ``tests.reference`` (row
partials in sample order, rows in row order); only ``fused`` (``fma=True``, where the compiler
chooses what to contract) is compared with ``HostEntry(plugin, lanes=1)``.  Every partition runs
twice: with whole planes, and with its planes cut at its first sample (``po`` = that sample, as
a Dask block or an MPI rank has them).  Every kernel of the core suite, the lane
suite's kernels (tests/test_lanes.py: per-sample while loops, nested if/else, break/continue,
integer arithmetic, vector planes, cells, fma=True) and the kernels below (a Newton loop, a
reassigned Param carried across loops, an int accumulator that is a float at its loop's head,
loops whose target the body reads, a uniform if around a hoisted loop, a masked loop inside a
hoisted one) run at partitions whose bases are not multiples of any vector or tile width, at
several tile widths, vector widths and unroll factors; outputs and cell row partials must match
byte for byte.  The machine code must hold packed arithmetic (the vector path really taken) and
no FMA; kernels the transform cannot take fall back to the laned loop and say why.
"""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

import eagle
import eagle.interrupt
from benchmarks.simd import cellsum, newton, newton_inputs
from eagle import Cell, In, Out, Param
from eagle import random as erandom
from eagle.host import HostEntry
from eagle.simd import ENV, Options, host_has_avx512
from tests.kernels import CASES, as_dict, same_bits
from tests.reference import cell, per_sample, row_partials
from tests.test_lanes import EXTRA, parts_of, planes_of, run_with


@eagle.kernel
def carried(i, x: In, lim: Param, steps: Param, y: Out, n: Out["int64"]):
    """A Param reassigned per sample and carried through a hoisted loop; an int that becomes a
    float at the loop's head; a loop target read in the (unrolled) body."""
    if x[i] > 0.0:
        lim = lim + x[i]
    acc = 0
    for k in range(steps):
        acc = acc + lim * 0.5 + k
    hits = 0
    for k in range(1, steps, 2):
        if acc > k:
            hits += 1
    y[i] = acc
    n[i] = hits


@eagle.kernel
def nested(i, x: In, steps: Param, y: Out, z: Out, total: Cell["sum"]):
    """A uniform if around a hoisted loop holding a masked while; a while-else; a cell written in
    a loop (the last write counts)."""
    v = abs(x[i]) + 0.5
    c = 0
    if steps > 2:
        for s in range(steps):
            while v > 1.0:
                v = v * 0.75
                c += 1
                if c > 50:
                    break
            else:
                v = v + 0.25 * s
            total[i] = v
    else:
        total[i] = -v
    w = 1.0
    while w < v * 10.0:
        w = w * 1.5
        if w > 3.0:
            continue
        w += 0.001
    y[i] = v + c
    z[i] = w


@eagle.kernel
def ranges(i, x: In, lo: Param, hi: Param, y: Out):
    """Hoisted loops over range(lo, hi, 3) and a negative literal step kept inside a segment."""
    v = x[i]
    for k in range(lo, hi, 3):
        v = v * 0.5 + k * 1e-3
    for k in range(5, 0, -1):
        v = v - k * 1e-4
    y[i] = v


@eagle.kernel
def retyped(i, x: In, steps: Param, y: Out):
    """``c`` is an int in the first loop over the tile and a float in the second: it falls back."""
    c = 3
    for _ in range(steps):
        y[i] = c // 2 + x[i]
    c = 0.5 * x[i]
    for _ in range(steps):
        y[i] = y[i] + c


@eagle.kernel
def local_array(i, p: In, steps: Param, q: Out[3], total: Cell["sum"]):
    """Per-sample arrays kept across a hoisted loop: a (size, tile) array each, the sample's column
    its view (np.zeros filled, an int64 one)."""
    buf = np.empty(3)
    acc = np.zeros(2)
    hits = np.ones(steps + 1, np.int64)
    for k in range(3):
        buf[k] = p[i, k]
    for t in range(steps):
        buf[0] = buf[0] * 0.5 + buf[1]
        acc[t % 2] += buf[0]
        hits[t] = hits[t] + (buf[0] > 0.0)
    for k in range(3):
        q[i, k] = buf[k] + acc[k % 2]
    total[i] = hits[0] + hits[steps - 1] * 0.5


@eagle.kernel
def rebound_array(i, p: In, steps: Param, q: Out[3]):
    """A per-sample array rebound in a hoisted loop: falls back to the laned loop."""
    buf = np.empty(3)
    for k in range(3):
        buf[k] = p[i, k]
    for _ in range(steps):
        buf = buf * 0.5
    for k in range(3):
        q[i, k] = buf[k]


MORE = {
    "newton": (newton, lambda n, r: {"x": newton_inputs(n, r), "tol": 1e-12}),
    "cellsum": (cellsum, lambda n, r: {"x": r.uniform(-3.0, 3.0, n)}),
    "carried": (carried, lambda n, r: {"x": r.uniform(-1.0, 1.0, n), "lim": 0.75, "steps": 9}),
    "nested": (nested, lambda n, r: {"x": r.uniform(-9.0, 9.0, n), "steps": 7}),
    "ranges": (ranges, lambda n, r: {"x": r.uniform(-1.0, 1.0, n), "lo": 2, "hi": 23}),
    "local_array": (local_array, lambda n, r: {"p": r.normal(size=(n, 3)), "steps": 6}),
}
SIMD = [n for n in CASES if n != "histogram"] + list(EXTRA) + list(MORE)


def kernel_of(name):
    if name in MORE:
        return MORE[name][0]
    return CASES[name][0] if name in CASES else EXTRA[name][0]


def inputs_of(name, n):
    if name in MORE:
        return MORE[name][1](n, np.random.default_rng(4242))
    return planes_of(name, n)


def run_simd(entry, name, n, threads=None):
    """``tests.test_lanes.run_with`` for any kernel of this module."""
    import tests.test_lanes as tl
    saved = tl.planes_of
    tl.planes_of = inputs_of
    try:
        return run_with(entry, name, n, threads)
    finally:
        tl.planes_of = saved


def in_bigger_buffers(plugin, planes, n):
    """Every plane (the Outs too) as the first ``n`` samples of a buffer twice as long, the rest
    NaN (or -1): code that indexes a cut plane at the wrong offset reads and writes there, and
    gives wrong bits rather than touching memory it does not own."""
    out = dict(planes)
    for role, name in plugin.arg_spec:
        if role.kind in ("In", "Out", "Mutable"):
            v = planes.get(name)
            if v is None:
                shape = (n,) if role.width is None else (n, role.width)
                v = np.zeros(shape, dtype=role.out_dtype)
            big = np.full((2 * n + 64,) + v.shape[1:], np.nan if v.dtype.kind in "fc" else -1, dtype=v.dtype)
            big[:n] = v
            out[name] = big[:n]
    return out


def run_at_offsets(entry, name, n, threads=None):
    """``run_simd``, each partition given its sliceable planes cut to its samples, ``po`` its first
    sample (the planes of a Dask block or an MPI rank); outputs written through the cuts."""
    p = entry.plugin
    pl = eagle.plan.plan(p, structure=eagle.exec.HostTeam, partitions=parts_of(p, n))
    bound = pl.bind(in_bigger_buffers(p, inputs_of(name, n), n))
    got = []
    for q in pl.partitions_for(n):
        cut = {k: v[q.base:q.stop] if k in p.sliceable else v for k, v in bound.values.items()}
        got.append(entry.run(cut, q.base, q.stop, po=q.base, threads=threads))
    rows = {c: np.concatenate([g[c] for g in got]) for c in p.cells}
    return as_dict(p, pl.result(bound, rows)), rows


def oracle(name, n):
    """The kernel run in Python, one sample after the other, its cells folded by tests.reference:
    (outputs and cells by name, each cell's row partials as a (rows, 2) array)."""
    outputs, contributions = per_sample(kernel_of(name), inputs_of(name, n))
    rows = {c: np.array(row_partials(op, v), dtype=np.float64).reshape(-1, 2) for c, (op, v) in contributions.items()}
    cells = {c: np.float64(cell(op, v)) for c, (op, v) in contributions.items()}
    return {**outputs, **cells}, rows


_REF = {}


def reference(name, n):
    if (name, n) not in _REF:
        if name == "fused":     # fma=True: the contractions are the compiler's choice, one at a time too
            _REF[name, n] = run_simd(HostEntry(eagle.deploy(kernel_of(name)), lanes=1), name, n)
        else:
            _REF[name, n] = oracle(name, n)
    return _REF[name, n]


def check(entry, name, n, threads=None):
    ref, ref_rows = reference(name, n)
    for run in (run_simd, run_at_offsets):
        got, got_rows = run(entry, name, n, threads)
        assert entry.path == "simd", entry.simd_reason
        assert same_bits(got, ref), (name, run.__name__)
        assert same_bits(got_rows, ref_rows), (name, run.__name__)


@pytest.mark.parametrize("name", SIMD)
@pytest.mark.parametrize("n", [203, 5, 1])
def test_simd_bits_equal_one_at_a_time(name, n):
    """203 samples, and 5 and 1: a tile shorter than one vector."""
    p = eagle.deploy(kernel_of(name))
    entry = eagle.host.host_entry(p)
    assert entry.path == "simd" and entry.simd_reason is None, entry.simd_reason
    assert p.host_simd_width == entry.simd_width > 1 and p.host_lanes_reason is None
    assert p.host_lanes == entry.lanes == 1                 # lanes are the laned loop's, not the tile
    check(entry, name, n)


@pytest.mark.parametrize("name", ["oscillator", "reductions", "cell_loops", "vectors", "carried"])
def test_no_samples(name):
    """No sample: empty planes of the declared dtypes and shapes, cells the identity of their op
    (sum 0, times 1, max -inf, min inf, land 1), as the Python run gives them."""
    p = eagle.deploy(kernel_of(name))
    got = eagle.plan.plan(p, structure=eagle.exec.HostTeam, npartitions=2).run(**inputs_of(name, 0))
    assert same_bits(as_dict(p, got), oracle(name, 0)[0])


OPTIONS = [Options(32, 256, 1), Options(64, 512, 3), Options(512, 256, 4), Options(256, 512, 8)]


@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: f"tile{o.tile}-v{o.vector}-u{o.unroll}")
@pytest.mark.parametrize("name", ["oscillator", "newton", "halvings", "collatz", "breaks", "branches",
                                  "vectors", "integers", "reductions", "cell_loops", "carried", "nested",
                                  "ranges", "stencil", "fused", "rotate", "local_array"])
def test_every_tile_and_vector_width(name, opts):
    """Partitions at bases 0, 13, 58, 61 (64, 160 for cells): no base on a vector or a tile."""
    p = eagle.deploy(kernel_of(name))
    check(HostEntry(p, simd=opts), name, 1001)


@pytest.mark.parametrize("name", ["oscillator", "newton", "nested", "cell_loops", "stencil"])
def test_simd_threads_and_plan(name):
    """Several chunks per thread team, and the plan itself, against one at a time."""
    p = eagle.deploy(kernel_of(name))
    check(HostEntry(p, simd=Options(64, 512, 4)), name, 4999, threads=2)
    out = eagle.plan.plan(p, structure=eagle.exec.HostTeam, npartitions=3).run(**inputs_of(name, 4999))
    assert same_bits(as_dict(p, out), reference(name, 4999)[0])


def test_unaligned_views():
    """Planes that start at an odd element of their buffer (views of a bigger array)."""
    p = eagle.deploy(kernel_of("oscillator"))
    d = inputs_of("oscillator", 301)
    big = {k: np.concatenate([np.zeros(3), v])[3:] if isinstance(v, np.ndarray) else v for k, v in d.items()}
    assert big["omega"].ctypes.data % 32 != 0
    got = as_dict(p, eagle.plan.plan(p, structure=eagle.exec.HostTeam).run(**big))
    assert same_bits(got, reference("oscillator", 301)[0])


# --- the vector path is really taken ------------------------------------------------------------

def simd_asm(entry, name):
    """Machine code of the entry's ``_eagle_simd`` as a run uses it: the kernel run first, then the
    one specialisation that run compiled (its state slots typed as the body types them: Newton's
    counter int64) compiled afresh with the same options (the disk cache keeps no assembly)."""
    import numba
    from eagle.codegen import jit_options
    run_simd(entry, name, 2 * entry.simd_width + 3)
    assert entry.path == "simd", entry.simd_reason
    opts = eval(f"dict({jit_options(entry.plugin)})")
    opts["cache"] = False
    tile = entry.module._eagle_tile
    assert len(tile.signatures) == 1, tile.signatures
    # the tile typed again for the run's arguments: what it passes _eagle_simd (a tile loaded from
    # the disk cache leaves the dispatcher of _eagle_simd without it)
    numba.njit(**opts)(tile.py_func).compile(tile.signatures[0])
    ran = entry.module._eagle_simd
    assert len(ran.signatures) == 1, ran.signatures
    sig = ran.signatures[0]
    jf = numba.njit(**opts)(ran.py_func)
    jf.compile(sig)
    return jf.inspect_asm(sig)


PACKED = ("vmulpd", "vaddpd", "vsubpd", "vdivpd")
FMA = ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub")


def packed_registers(asm):
    """Packed double arithmetic on ymm/zmm registers in ``asm``."""
    return [ln for ln in asm.splitlines() if any(op in ln for op in PACKED) and ("%ymm" in ln or "%zmm" in ln)]


@pytest.mark.parametrize("name", ["oscillator", "newton", "axpb", "cellsum"])
def test_packed_arithmetic_and_no_contraction(name):
    entry = eagle.host.host_entry(eagle.deploy(kernel_of(name)))
    asm = simd_asm(entry, name)
    if name == "newton":                     # the specialisation that runs: its counter's slot is int64
        ran = entry.module._eagle_simd
        slots = dict(zip(ran.py_func.__code__.co_varnames, ran.signatures[0]))
        assert str(slots["c__eagle_t"].dtype) == "int64", slots
    packed = packed_registers(asm)
    assert packed, f"{name}: no packed arithmetic on ymm/zmm registers"
    if host_has_avx512() and name == "oscillator":
        assert any("%zmm" in ln for ln in packed), "512-bit vectors were asked for"
    assert not any(op in asm for op in FMA), name


def test_fma_kernel_contracts_alike():
    """fma=True: the vectorised code contracts (so the check can see it) and still has the bits of
    one sample at a time (test_every_tile_and_vector_width)."""
    entry = eagle.host.host_entry(eagle.deploy(kernel_of("fused")))
    assert entry.path == "simd"
    assert any(op in simd_asm(entry, "fused") for op in FMA)


USERS_LOOP = """
import numba, numpy as np
@numba.njit(cache=False)
def users_loop(a, b):
    for k in range(a.shape[0]):
        a[k] = a[k] * 1.5 + b[k]
users_loop(np.ones(64), np.ones(64))
asm = users_loop.inspect_asm(users_loop.signatures[0])
"""


def test_wide_vectors_stay_in_eagle():
    """The 512-bit request is eagle's functions' own attribute: a user's numba loop compiled after
    eagle's keeps LLVM's default width for this CPU -- the width the same loop gets in a fresh
    interpreter that never imported eagle (256 bits on most AVX-512 CPUs, 512 on some, e.g. Zen 5)."""
    fresh = subprocess.run([sys.executable, "-c", USERS_LOOP + "print('%zmm' in asm)"],
                           capture_output=True, text=True, timeout=120, check=True)
    default_is_512 = fresh.stdout.strip().splitlines()[-1] == "True"
    check(eagle.host.host_entry(eagle.deploy(kernel_of("oscillator"))), "oscillator", 203)
    here = {}
    exec(USERS_LOOP, here)
    asm = here["asm"]
    assert "vmulpd" in asm
    if host_has_avx512():
        assert ("%zmm" in asm) == default_is_512


# --- which path, and why ------------------------------------------------------------------------

@pytest.mark.parametrize("kernel,why", [
    (CASES["histogram"][0], "cross_sample_write"),
    ("picky", "raises"),
    ("early", "returns before its end"),
    (rebound_array, "per-sample array 'buf'"),
])
def test_fallbacks_say_why(kernel, why):
    import tests.kernels
    import tests.test_lanes
    if kernel == "picky":
        kernel = tests.kernels.picky
    elif kernel == "early":
        kernel = tests.test_lanes.early
    entry = HostEntry(eagle.deploy(kernel))
    assert entry.path != "simd" and why in entry.simd_reason


def test_a_local_that_changes_type_falls_back_after_typing():
    p = eagle.deploy(retyped)
    entry = HostEntry(p)
    assert entry.path == "simd"
    d = {"x": np.linspace(-1.0, 1.0, 77), "steps": 3}
    got = eagle.plan.plan(p, structure=eagle.exec.HostTeam).run(**d)
    entry = eagle.host.host_entry(p)
    assert entry.path == "lanes" and "'c'" in entry.simd_reason and "int64" in entry.simd_reason
    y = np.empty(77)
    for k, v in enumerate(d["x"]):
        y[k] = 3 // 2 + v
        for _ in range(3):
            y[k] = y[k] + 0.5 * v
    assert same_bits(got, y)


def test_rebound_array_runs_laned_with_the_same_bits():
    p = eagle.deploy(rebound_array)
    assert p.host_lanes > 1 and p.host_simd_width is None and eagle.host.host_entry(p).path == "lanes"
    d = {"p": np.random.default_rng(5).normal(size=(40, 3)), "steps": 4}
    got = eagle.plan.plan(p, structure=eagle.exec.HostTeam).run(**d)
    q = d["p"].copy()
    for _ in range(4):
        q = q * 0.5
    assert same_bits(got, q)


def test_env_turns_it_off(monkeypatch):
    p = eagle.deploy(kernel_of("oscillator"))
    monkeypatch.setenv(ENV, "0")
    e = HostEntry(p)
    assert e.path == "lanes" and ENV in e.simd_reason
    monkeypatch.setenv(ENV, "2")
    with pytest.raises(ValueError, match=ENV):
        HostEntry(p)
    monkeypatch.delenv(ENV)
    monkeypatch.setenv("EAGLE_HOST_LANES", "4")
    e = HostEntry(p)
    assert e.path == "lanes" and e.lanes == 4 and "EAGLE_HOST_LANES" in e.simd_reason
    assert HostEntry(p, lanes=2).simd_reason.startswith("a lane count")


def test_vectorised_loop_that_does_not_compile_falls_back(monkeypatch):
    import eagle.host_codegen as hc
    real = hc.simd_source
    monkeypatch.setattr(eagle.host, "simd_source",
                        lambda plugin, opts: real(plugin, opts).replace(
                            "def _eagle_simd(", "def _eagle_unused():\n    pass\n\ndef _eagle_simd_x(", 1))
    p = eagle.deploy(kernel_of("branches"))
    e = HostEntry(p)
    assert e.path == "simd"
    got, _ = run_simd(e, "branches", 50)
    assert e.path == "lanes" and "did not compile" in e.simd_reason
    assert same_bits(got, reference("branches", 50)[0])


def test_bad_options_are_refused():
    p = eagle.deploy(kernel_of("axpb"))
    for bad in (Options(100, 512, 4), Options(128, 384, 4), Options(128, 512, 0)):
        with pytest.raises(ValueError):
            HostEntry(p, simd=bad)


def test_newton_really_iterates_per_sample():
    """The masked loop runs each sample's own count: 1 to 30 iterations, as one at a time."""
    got, _ = run_simd(eagle.host.host_entry(eagle.deploy(newton)), "newton", 2000)
    assert got["iters"].min() <= 2 and got["iters"].max() >= 25
    x = inputs_of("newton", 2000)["x"]
    assert np.all(np.abs(got["root"] - np.sqrt(x)) <= 1e-6 * np.sqrt(x))
    assert not math.isnan(got["root"].sum())


@eagle.kernel
def walk(i, seed: Param, steps: Param, y: Out):
    """Counter-based draws in a hoisted loop."""
    v = 0.0
    for k in range(steps):
        v = v * 0.5 + erandom.uniform(seed, i, k)
    y[i] = v


def test_draws_vectorise_and_the_module_caches(recwarn):
    """A kernel drawing from eagle.random takes the vectorised loop, gives the bits of one sample at
    a time, and numba can cache every function of its module (no "Cannot cache" warning)."""
    p = eagle.deploy(walk)
    entry = HostEntry(p, simd=Options(64, 0, 4))
    y = np.zeros(333)
    bound = eagle.bind.bind(p, {"seed": 7, "steps": 9, "y": y})
    entry.run(bound.values, 0, 333, threads=1)
    assert entry.path == "simd", entry.simd_reason
    ref, _ = per_sample(walk, {"seed": 7, "steps": 9, "y": np.zeros(333)})
    assert same_bits(y, ref["y"])
    assert not [w for w in recwarn.list if "Cannot cache" in str(w.message)]
