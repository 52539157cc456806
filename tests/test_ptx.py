"""The device code, read as PTX: compiled by numba-cuda on the CPU, no GPU and no driver.

``eagle.device_ptx.device_ptx(plugin, cc, **planes)`` (``Plugin.device_ptx``) compiles the
launch kernel a launch with those planes would compile, with the same options and hooks.
Checked here, for sm_90 (H100/H200; numba picks the arch-specific ``sm_90a``) and sm_80:

* every suite kernel (tests/kernels.py, eagle/models.py) compiles, to one ``.visible .entry``
  named after its launch kernel, for the target asked, with its body in it;
* without ``@eagle.kernel(fma=True)`` nothing may fuse a multiply and an add: no
  ``fma.rn.f64``, and no un-rounded ``add/sub/mul.f64`` that ptxas would be free to fuse --
  except in kernels that call libdevice's transcendental functions (exp, sin, log...), whose own
  code uses FMA on purpose; there the kernel's own arithmetic still must not fuse.  With
  ``fma=True`` an ``a*b+c`` kernel contains ``fma.rn.f64``;
* a ``@numba.njit`` helper imported from a module compiles into the device code.

Needs numba-cuda with NVVM and libdevice (``scripts/ptx_check.sh`` makes a venv with them);
skipped elsewhere.  ``python -m tests.test_ptx`` prints the per-kernel table.
"""
from __future__ import annotations

import ast
import importlib.util
import math
import os
import re

import numba
import numpy as np
import pytest

import eagle
import eagle.models
from eagle import In, Out, Param
from tests import kernels as suite

CCS = [(9, 0), (8, 0)]
TARGET = {(9, 0): "sm_90a", (8, 0): "sm_80"}     # what a launch on such a GPU compiles for


def nvvm_missing():
    """Why PTX cannot be compiled here, or None."""
    if importlib.util.find_spec("numba_cuda") is None:
        return ("numba-cuda is not installed (numba's built-in CUDA target is not what eagle runs): "
                "pip install 'numba-cuda[cu12]', or run scripts/ptx_check.sh")
    try:
        import numba.cuda as cuda
    except ImportError as e:
        return f"numba's CUDA target is not importable ({e}): pip install 'numba-cuda[cu12]' (scripts/ptx_check.sh)"
    if getattr(cuda, "implementation", None) != "NVIDIA":
        return ("numba.cuda is numba's built-in CUDA target, not numba-cuda: run scripts/ptx_check.sh "
                "(a venv with numba-cuda[cu12])")
    try:
        from numba.cuda.cudadrv import nvvm
        nvvm.NVVM().get_version()
        nvvm.LibDevice().get()
    except Exception as e:  # noqa: BLE001 - a missing libnvvm or libdevice, however numba says it
        return f"numba-cuda finds no NVVM/libdevice ({type(e).__name__}: {str(e).strip()[:200]}): pip install 'numba-cuda[cu12]'"
    return None


_MISSING = nvvm_missing()
if _MISSING and os.environ.get("EAGLE_REQUIRE_PTX") == "1":     # scripts/ptx_check.sh: skipping is failing
    raise RuntimeError(f"EAGLE_REQUIRE_PTX=1, but no PTX can be compiled here: {_MISSING}")
needs_nvvm = pytest.mark.skipif(_MISSING is not None, reason=f"PTX checks: {_MISSING}")


# -- the suite and its planes --------------------------------------------------------------

def suite_kernels() -> dict:
    """Every kernel of tests/kernels.py (which the device cases run) and eagle/models.py."""
    found = {}
    for mod in (suite, eagle.models):
        for value in vars(mod).values():
            if isinstance(value, eagle.Kernel):
                found.setdefault(value.name, value)
    return dict(sorted(found.items()))


KERNELS = suite_kernels()
_BY_KERNEL = {id(k): name for name, (k, _, _) in suite.CASES.items()}


def planes_for(kernel, n=45) -> dict:
    """The suite's inputs for the kernel, or float64 planes (and Params 1.0, or 1 where the body
    passes them to range(); Tables of 7 increasing values) made from its roles."""
    name = _BY_KERNEL.get(id(kernel))
    if name is not None:
        return suite.inputs(name, n)
    plugin = eagle.deploy(kernel)
    out = {}
    for role, nm in plugin.arg_spec:
        if role.kind in ("In", "Mutable"):
            use = plugin.plane_uses.get(nm)
            out[nm] = np.ones((n, 3)) if use is not None and use.index_dims == 2 else np.ones(n)
        elif role.kind == "Param" and nm not in plugin.defaults:
            out[nm] = 1 if nm in plugin.range_params else 1.0
        elif role.kind == "Table":
            out[nm] = np.linspace(0.0, 1.0, 7)
    return out


#: instructions only the kernel's own body (or its fold) produces: evidence it is in the PTX
BODY = {
    "axpb": [r"ld\.param\.f64", r"st\.global\.f64"],                     # Params a, b; y[i]
    "transcendental": [r"sqrt\.rn\.f64", r"abs\.f64", r"st\.global\.f64"],
    "stencil": [r"div\.rn\.f64", r"st\.global\.f64"],                     # / 5.0
    "histogram": [r"cvt\.rzi\.s64\.f64", r"st\.global\.f64"],             # int(x * nbins)
    "reductions": [r"setp\.gt\.f64", r"setp\.nan\.f64", r"st\.local\.f64", r"st\.global\.f64"],
    "oscillator": [r"ld\.param\.f64", r"st\.local\.f64", r"st\.global\.f64"],
    "halvings": [r"setp\.gt\.f64", r"cvt\.rn\.f64\.s64", r"st\.global\.f64"],
    "vectors": [r"sqrt\.rn\.f64", r"ld\.param\.f64", r"st\.global\.f64"],
    "integers": [r"cvt\.rn\.f64\.s64", r"st\.global\.u64", r"st\.global\.f64"],
    "neighbour_sum": [r"setp\.ge\.f64", r"st\.local\.f64", r"st\.global\.f64"],
    "picky": [r"setp\.lt\.f64", r"sqrt\.rn\.f64"],
    "slow_neighbours": [r"rem\.s64", r"mul\.rn\.f64", r"st\.global\.f64"],   # x[(i + k) % n] * 0.5
    "interp": [r"setp\.le\.f64", r"div\.rn\.f64", r"st\.global\.f64"],  # xs[mid] <= xi; the slope
    "slow_sine": [r"cvt\.rn\.f64\.s64", r"mul\.rn\.f64", r"st\.global\.f64"],  # x[i] + k; 0.5 * sin(...)
}

#: math functions that come from libdevice, whose own code uses fma.rn.f64
LIBDEVICE = {"exp", "expm1", "exp2", "log", "log1p", "log2", "log10", "sin", "cos", "tan", "asin", "acos",
             "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "pow", "erf", "erfc",
             "gamma", "lgamma", "hypot", "cbrt"}

FMA = re.compile(r"^\s*(?:@%p\d+\s+)?fma\.rn\.f64\b", re.M)
#: add/sub/mul without a rounding mode: ptxas may fuse those into an FMA itself
LOOSE = re.compile(r"^\s*(?:@%p\d+\s+)?(?:add|sub|mul)\.f64\b", re.M)


def transcendental_calls(plugin) -> list:
    """The libdevice functions the body and its source-compiled helpers call (``**`` is pow)."""
    sources = [plugin.source]
    stack = list(plugin.frozen)
    while stack:
        g = stack.pop()
        if g.get("kind") == "function":
            sources.append(g["source"])
            stack.extend(g.get("frozen", []))
        elif g.get("kind") == "import" and g.get("attr") in LIBDEVICE:
            sources.append(f"{g['name']}()")
    calls = set()
    for src in sources:
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                if name in LIBDEVICE:
                    calls.add(name)
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
                calls.add("** (pow)")
    return sorted(calls)


def ptx_of(kernel, cc, **planes):
    from eagle.device_ptx import device_ptx
    return device_ptx(eagle.deploy(kernel), cc, **planes)


def entries(ptx):
    return re.findall(r"^\.visible \.entry (\S+?)\(", ptx, re.M)


def launch_lto(plugin):
    from eagle.device import device_entry
    return device_entry(plugin).launch.targetoptions.get("lto")


def _contraction_hint(plugin):
    if launch_lto(plugin):
        return (" -- the launch kernel is linked with LTO (targetoptions lto=True, though launch_options "
                "asks lto=False: numba-cuda's @cuda.jit(...) decorator form drops lto), and nvJitLink "
                "contracts at link time whatever NVVM was told")
    return ""


# -- every suite kernel compiles, for each target ------------------------------------------

@needs_nvvm
@pytest.mark.parametrize("cc", CCS, ids=lambda cc: f"sm_{cc[0]}{cc[1]}")
@pytest.mark.parametrize("name", list(KERNELS))
def test_suite_kernel_compiles_to_its_launch_entry(name, cc):
    kernel = KERNELS[name]
    ptx = ptx_of(kernel, cc, **planes_for(kernel))
    (entry,) = entries(ptx)                               # one kernel in the module: the launch
    assert "_eagle_launch" in entry and f"eagle_device_{name}" in entry, entry
    assert re.search(rf"^\.target {TARGET[cc]}\b", ptx, re.M), re.findall(r"^\.target .*", ptx, re.M)
    missing = [m for m in BODY.get(name, [r"st\.(global|local)?\.?\w+"]) if not re.search(m, ptx)]
    assert not missing, f"kernel {name!r}: the body's instructions {missing} are not in its PTX"


def test_every_suite_kernel_has_body_markers():
    """A kernel added to the suite gets its own evidence-of-body instructions here."""
    assert set(KERNELS) <= set(BODY), sorted(set(KERNELS) - set(BODY))


# -- contraction ---------------------------------------------------------------------------

@needs_nvvm
@pytest.mark.parametrize("cc", CCS, ids=lambda cc: f"sm_{cc[0]}{cc[1]}")
@pytest.mark.parametrize("name", list(KERNELS))
def test_nothing_fuses_without_declared_fma(name, cc):
    kernel = KERNELS[name]
    plugin = eagle.deploy(kernel)
    assert not plugin.fma
    ptx = ptx_of(kernel, cc, **planes_for(kernel))
    loose = len(LOOSE.findall(ptx))
    assert loose == 0, (f"kernel {name!r}: {loose} add/sub/mul.f64 without .rn, which ptxas may fuse"
                        f"{_contraction_hint(plugin)}")
    fused = len(FMA.findall(ptx))
    calls = transcendental_calls(plugin)
    if not calls:
        assert fused == 0, f"kernel {name!r}: {fused} fma.rn.f64 without fma=True{_contraction_hint(plugin)}"
        return
    # libdevice's exp/sin/log use fma.rn.f64 themselves; the kernel's own a*b+c must still not
    # fuse: declaring fma=True adds fused operations
    declared = len(FMA.findall(ptx_of(eagle.Kernel(kernel.fn, fma=True), cc, **planes_for(kernel))))
    assert 0 < fused < declared, (name, calls, fused, declared)


@needs_nvvm
def test_launch_kernel_links_without_lto():
    """launch_options asks for lto=False (so nothing after NVVM fuses); the dispatcher must keep it."""
    from eagle.device_codegen import launch_options
    plugin = eagle.deploy(eagle.models.axpb)
    if "lto=False" not in launch_options(plugin):
        pytest.skip("this numba's cuda.jit takes no lto=")
    assert launch_lto(plugin) is False, (
        f"the launch dispatcher has lto={launch_lto(plugin)!r} although it was declared with "
        f"@cuda.jit({launch_options(plugin)}): numba-cuda's decorator form drops lto= (pass the function: "
        "cuda.jit(fn, lto=False, ...))")


@eagle.kernel(fma=True)
def fused_axpb(i, x: In, a: Param, b: Param, y: Out):
    y[i] = a * x[i] + b


@eagle.kernel
def plain_axpb(i, x: In, a: Param, b: Param, y: Out):
    y[i] = a * x[i] + b


@eagle.kernel
def only_exp(i, x: In, y: Out):
    y[i] = math.exp(x[i])


AXPB = {"x": np.zeros(8), "a": 2.0, "b": 1.0}


@needs_nvvm
@pytest.mark.parametrize("cc", CCS, ids=lambda cc: f"sm_{cc[0]}{cc[1]}")
def test_declared_fma_fuses_a_times_b_plus_c(cc):
    fused = ptx_of(fused_axpb, cc, **AXPB)
    plain = ptx_of(plain_axpb, cc, **AXPB)
    assert len(FMA.findall(fused)) >= 1, "fma=True: a*x+b should become fma.rn.f64"
    assert len(FMA.findall(plain)) == 0 and len(LOOSE.findall(plain)) == 0, _contraction_hint(
        eagle.deploy(plain_axpb))
    assert re.search(r"mul\.rn\.f64", plain) and re.search(r"add\.rn\.f64", plain)


@needs_nvvm
def test_libdevice_brings_its_own_fma():
    """exp alone, no arithmetic of the kernel's: its fma.rn.f64 are libdevice's, contraction off."""
    ptx = ptx_of(only_exp, (9, 0), x=np.zeros(8))
    assert len(FMA.findall(ptx)) > 0
    assert transcendental_calls(eagle.deploy(only_exp)) == ["exp"]


# -- helpers -------------------------------------------------------------------------------

@numba.njit
def twice(x):
    return 2.0 * x


@numba.njit
def norm2(a, b):
    return math.sqrt(a * a + b * b)


def clamp(v, hi):                       # a plain function: compiled from its source with the kernel
    return v if v < hi else hi


@eagle.kernel
def doubled(i, x: In, y: Out):
    y[i] = twice(x[i])


@eagle.kernel
def lengths(i, x: In, w: In, y: Out):
    y[i] = clamp(norm2(x[i], w[i]), 10.0)


@eagle.kernel(fma=True)
def lengths_fused(i, x: In, w: In, y: Out):
    y[i] = clamp(norm2(x[i], w[i]), 10.0)


def test_njit_helpers_are_imported_not_copied():
    """A @numba.njit helper of an importable module is frozen as an import of that dispatcher."""
    entry = {g["name"]: g for g in eagle.deploy(doubled).frozen}["twice"]
    assert (entry["kind"], entry["module"], entry["attr"]) == ("import", __name__, "twice")
    kinds = {g["name"]: g["kind"] for g in eagle.deploy(lengths).frozen}
    assert kinds == {"clamp": "function", "norm2": "import"}, kinds


@needs_nvvm
@pytest.mark.parametrize("cc", CCS, ids=lambda cc: f"sm_{cc[0]}{cc[1]}")
def test_njit_helper_compiles_into_device_code(cc):
    """numba-cuda compiles a CPU dispatcher called from device code as a CUDA device function of its
    py_func; eagle's no-contraction hook covers it like the body."""
    ptx = ptx_of(doubled, cc, x=np.zeros(8))
    assert len(entries(ptx)) == 1
    assert re.search(r"(add|mul)\.rn\.f64", ptx), "2.0 * x: the helper's arithmetic is not in the PTX"
    if not launch_lto(eagle.deploy(doubled)):      # numba's per-function symbols (LTO drops them)
        assert "8test_ptx5twice" in ptx, "no CUDA compilation of tests.test_ptx.twice in the PTX"
    plain = ptx_of(lengths, cc, x=np.zeros(8), w=np.zeros(8))
    assert re.search(r"sqrt\.rn\.f64", plain) and re.search(r"min\.f64", plain)   # norm2, clamp
    assert len(FMA.findall(plain)) == 0 and len(LOOSE.findall(plain)) == 0, _contraction_hint(
        eagle.deploy(lengths))
    assert len(FMA.findall(ptx_of(lengths_fused, cc, x=np.zeros(8), w=np.zeros(8)))) >= 1


@eagle.kernel
def allocates(i, x: In, y: Out):
    t = np.empty(3)                     # no allocation in device code
    t[0] = x[i]
    y[i] = t[0]


@needs_nvvm
def test_device_compile_error_names_the_kernel_and_target():
    with pytest.raises(RuntimeError, match=r"kernel 'allocates': its launch kernel did not compile for compute_80"):
        ptx_of(allocates, (8, 0), x=np.zeros(4))


# -- what device_ptx refuses (no compiler needed) -------------------------------------------

def test_missing_plane_is_refused_by_kernel_name():
    from eagle.device_ptx import device_ptx
    with pytest.raises(TypeError, match=r"kernel 'axpb' is missing plane 'x' \(In\)"):
        device_ptx(eagle.deploy(eagle.models.axpb), a=1.0, b=2.0)
    with pytest.raises(TypeError, match=r"kernel 'axpb' is missing Param 'b'"):
        device_ptx(eagle.deploy(eagle.models.axpb), x=np.zeros(3), a=1.0)


def test_unknown_name_and_cell_are_refused_by_kernel_name():
    from eagle.device_ptx import device_ptx
    with pytest.raises(TypeError, match=r"kernel 'axpb' has no argument 'z' \(its arguments: x, a, b, y\)"):
        device_ptx(eagle.deploy(eagle.models.axpb), x=np.zeros(3), a=1.0, b=2.0, z=np.zeros(3))
    with pytest.raises(TypeError, match=r"'energy' is a Cell of kernel 'oscillator'"):
        device_ptx(eagle.deploy(eagle.models.oscillator), energy=np.zeros(3))


def test_bad_cc_and_bad_planes_are_refused():
    from eagle.device_ptx import device_ptx
    p = eagle.deploy(eagle.models.axpb)
    with pytest.raises(ValueError, match=r"kernel 'axpb': cc='sm_90'"):
        device_ptx(p, "sm_90", x=np.zeros(3), a=1.0, b=2.0)
    with pytest.raises(TypeError, match=r"Param 'a' of kernel 'axpb' takes one number"):
        device_ptx(p, x=np.zeros(3), a=np.zeros(3), b=2.0)
    with pytest.raises(TypeError, match=r"output plane 'y' of kernel 'axpb' is float32, but the kernel declares it "
                                        r"float64"):
        device_ptx(p, x=np.zeros(3), a=1.0, b=2.0, y=np.zeros(3, np.float32))


def test_launch_types_follow_the_planes():
    """The types the launch kernel is compiled for: index ints, C arrays by dtype/ndim, Params by value."""
    from numba import types

    from eagle.device_ptx import launch_types, target_cc
    arr = lambda dt, nd: types.Array(dt, nd, "C")          # noqa: E731
    got = launch_types(eagle.deploy(suite.vectors), {"p": np.zeros((5, 3), np.float32)[:, :2], "scale": 2})
    assert got == (types.int64,) * 4 + (arr(types.float32, 2), types.int64, arr(types.float64, 2),
                                        arr(types.float64, 1), arr(types.int64, 1), types.int64)
    got = launch_types(eagle.deploy(suite.integers), {"k": np.arange(4)})
    assert got[4:7] == (arr(types.int64, 1), arr(types.float64, 1), arr(types.int64, 1))
    got = launch_types(eagle.deploy(eagle.models.oscillator), planes_for(eagle.models.oscillator))
    assert got[-3:] == (arr(types.float64, 2), arr(types.int64, 1), types.int64)   # row partials, bounds
    assert target_cc("k", (9, 0)) == (9, 0, "a") and target_cc("k", (8, 6)) == (8, 6, "")
    assert target_cc("k", (9, 0, "")) == (9, 0, "")


# -- the table -----------------------------------------------------------------------------

def main():
    if _MISSING:
        raise SystemExit(f"no PTX here: {_MISSING}")
    print(f"{'kernel':16} {'target':8} {'lto':5} {'fma.rn.f64':>10} {'loose':>5}  libdevice calls")
    for name, kernel in KERNELS.items():
        plugin = eagle.deploy(kernel)
        for cc in CCS:
            ptx = ptx_of(kernel, cc, **planes_for(kernel))
            tgt = re.search(r"^\.target (\w+)", ptx, re.M).group(1)
            print(f"{name:16} {tgt:8} {str(launch_lto(plugin)):5} {len(FMA.findall(ptx)):>10} "
                  f"{len(LOOSE.findall(ptx)):>5}  {', '.join(transcendental_calls(plugin)) or '-'}")


if __name__ == "__main__":
    main()
