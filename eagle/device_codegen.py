"""The device entry's source: the kernel body and its launch kernel, for numba's CUDA target.

The body is the SAME rewritten function the host compiles (``codegen.body_function``, with the
same frozen globals from ``codegen.globals_source``); here it becomes a
``@cuda.jit(device=True)`` function, called by a generated launch kernel:

* thread ``t`` of a launch takes samples ``[base + t * per, min(base + (t + 1) * per, stop))``
  -- one sample per thread for an ordinary kernel, one row for a kernel with cells, the
  whole partition in sample order (one thread) for a kernel that writes other samples;
* a thread past ``stop`` does nothing (the bounds guard);
* a kernel with cells folds each row's contributions in ascending sample order with
  ``eagle.rows.row_partial`` -- the same Python function the host uses, compiled for CUDA
  (``cuda_row_partial``) -- and writes the row partial pair; never atomics.

Floating-point contraction.  NVVM, numba's CUDA compiler, contracts ``a * b + c`` into one
fused multiply-add by default (its ``-fma=1`` option), which the host (numba on the CPU, no
fastmath) never does.  numba's ``cuda.jit`` exposes no switch for that option (a ``fastmath``
that turns it on, nothing that turns it off; see numba-cuda issue #118), so eagle passes
``fma=False`` to ``cuda.jit`` where numba accepts it, and otherwise adds ``fma=0`` to the NVVM
options of the compilations it starts itself (``no_contraction``), unless the kernel was
declared ``@eagle.kernel(fma=True)``.  The launch kernel is compiled without link-time
optimisation where numba offers the choice, so nothing after NVVM fuses either: nvJitLink,
which links LTO-IR, fuses multiply-adds whatever NVVM was told.  It is built with
``cuda.jit(fn, **options)``, not the decorator form ``@cuda.jit(**options)``, which in
numba-cuda 0.30 drops ``lto=False`` (the PTX test checks the dispatcher keeps it).
"""
from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import threading
import types

from . import __version__, bounds, rows
from .access import CROSS_SAMPLE_WRITE
from .codegen import body_call_args, body_function, body_raises, globals_source
from .bounds import AT, ERR, LX
from .rows import BUILTIN_ALIASES, MIN, RANGE, ROW, row_loop_lines
from .syntax import parse

_STATE = threading.local()


@functools.lru_cache(maxsize=None)
def cuda_row_partial():
    """``eagle.rows.row_partial`` compiled for CUDA device code, with ``step`` likewise.

    The same Python functions as the host's (their ``py_func``), so the fold rule has one copy.
    """
    from numba import cuda
    step = cuda.jit(device=True)(rows.step.py_func)
    rp = rows.row_partial.py_func
    fn = types.FunctionType(rp.__code__, {**rp.__globals__, "step": step}, rp.__name__)
    return cuda.jit(device=True)(fn)


@functools.lru_cache(maxsize=None)
def cuda_at():
    """``eagle.bounds.at_device`` compiled for CUDA device code (a kernel cannot raise there)."""
    from numba import cuda
    return cuda.jit(device=True)(bounds.at_device.py_func)


@functools.lru_cache(maxsize=None)
def cuda_local_at():
    """``eagle.bounds.local_at_device`` compiled for CUDA device code: an index of an array the body
    made, checked against its axis."""
    from numba import cuda
    return cuda.jit(device=True)(bounds.local_at_device)


def jit_accepts(name: str) -> bool:
    from numba import cuda
    try:
        return name in inspect.signature(cuda.jit).parameters
    except (TypeError, ValueError):
        return False


def launch_options(plugin) -> str:
    """Keyword arguments of the launch kernel's ``cuda.jit``."""
    opts = ["cache=True"]
    if body_raises(plugin):
        opts += ["debug=True", "opt=False"]      # a raise is only reported from a debug kernel
    if jit_accepts("fma"):
        opts.append(f"fma={bool(plugin.fma)}")
    if jit_accepts("lto"):
        opts.append("lto=False")
    return ", ".join(opts)


def contraction(plugin) -> str:
    return "on (declared fma=True)" if plugin.fma else "off"


def refuse_indexing_helpers(plugin, entries=None):
    """A helper compiled from source that indexes an array: refused, naming the kernel and the
    helper (device code has no bounds checks of its own; the body's indices are eagle's)."""
    for g in plugin.frozen if entries is None else entries:
        if g["kind"] != "function":
            continue
        for n in ast.walk(parse(g["source"])):
            if isinstance(n, ast.Subscript) and not (isinstance(n.value, ast.Attribute) and n.value.attr == "shape"):
                raise ValueError(f"kernel {plugin.name!r}: helper {g['name']!r} indexes an array "
                                 f"({ast.unparse(n)}), which the device cannot check there; index it in the "
                                 "kernel's body and pass the values")
        refuse_indexing_helpers(plugin, g["frozen"])


def device_source(plugin) -> str:
    """The generated module: frozen globals, the body as a device function, the launch kernel."""
    refuse_indexing_helpers(plugin)
    args = [name for _, name in plugin.arg_spec]
    cells = plugin.cells
    body_args = body_call_args(plugin)
    ind = "    "
    out = [
        f"# Generated by eagle {__version__} for kernel {plugin.name!r} (key {plugin.key}) on the device; "
        "do not edit.",
        f"# floating-point contraction: {contraction(plugin)}",
        "import numpy as _eagle_np",
        "from numba import cuda as _eagle_cuda",
        "from eagle.device_codegen import cuda_at, cuda_local_at, cuda_row_partial as _eagle_rp",
        "_eagle_row_partial = _eagle_rp()",
        f"{AT} = cuda_at()",
        f"{LX} = cuda_local_at()",
        BUILTIN_ALIASES,
        "",
        "def _eagle_launch_jit(fn):      # cuda.jit(fn, ...) keeps every option (the decorator form drops lto)",
        f"    return _eagle_cuda.jit(fn, {launch_options(plugin)})",
        "",
        globals_source(plugin, helper_decorator="@_eagle_cuda.jit(device=True)"),
        "",
        "@_eagle_cuda.jit(device=True)",
        body_function(plugin),
        "",
        "@_eagle_launch_jit",
        f"def _eagle_launch(_eagle_base, _eagle_stop, _eagle_per, _eagle_po, {', '.join(args)}, {ERR}, _eagle_row0):",
        f"{ind}_eagle_lo = _eagle_base + _eagle_cuda.grid(1) * _eagle_per",
        f"{ind}if _eagle_lo >= _eagle_stop:",
        f"{ind*2}return",
        f"{ind}_eagle_hi = {MIN}(_eagle_lo + _eagle_per, _eagle_stop)",
    ]
    if not cells:
        out += [f"{ind}for _eagle_i in {RANGE}(_eagle_lo, _eagle_hi):",
                f"{ind*2}_eagle_body(_eagle_i, {body_args}, _eagle_po, 0)"]
        return "\n".join(out) + "\n"

    def samples(ind2, r, e):
        return [f"{ind2}for _eagle_i in {RANGE}({r}, {e}):",
                f"{ind2}    _eagle_body(_eagle_i, {body_args}, _eagle_po, {r})"]
    out += row_loop_lines(ind, cells, "_eagle_lo", "_eagle_hi", f"_eagle_cuda.local.array({ROW}, _eagle_np.float64)",
                          samples)
    return "\n".join(out) + "\n"


def samples_per_thread(plugin, count: int) -> int:
    """How the device cuts a launch: one sample per thread, one row (``ROW`` samples) per thread
    for a kernel with cells, everything in one thread for cross_sample_write."""
    if plugin.exec_access == CROSS_SAMPLE_WRITE:
        return max(count, 1)
    return ROW if plugin.cells else 1


# -- no contraction where numba offers no switch ----------------------------------------------

def _install_nvvm_hook():
    """Wrap numba's NVVM entry once so compilations inside ``no_contraction()`` pass ``fma=0``."""
    try:
        from numba.cuda.cudadrv import nvvm
    except ImportError:
        return
    if getattr(nvvm.compile_ir, "_eagle_hook", False):
        return
    original = nvvm.compile_ir

    def compile_ir(llvmir, **options):
        if getattr(_STATE, "no_fma", False) and not options.get("fastmath"):
            options.setdefault("fma", False)
        return original(llvmir, **options)

    compile_ir._eagle_hook = True
    nvvm.compile_ir = compile_ir


@contextlib.contextmanager
def no_contraction(plugin):
    """Compile (and launch, which compiles lazily) without FMA contraction unless ``plugin.fma``."""
    if plugin.fma or jit_accepts("fma"):
        yield
        return
    _install_nvvm_hook()
    before = getattr(_STATE, "no_fma", False)
    _STATE.no_fma = True
    try:
        yield
    finally:
        _STATE.no_fma = before
