"""``Plugin.device_ptx``: the PTX of a plugin's launch kernel, compiled with no GPU and no driver.

numba-cuda compiles to PTX on the CPU (NVVM and libdevice come with the ``cuda12`` extra's
wheels).  ``device_ptx(plugin, cc, **planes)`` compiles the generated launch kernel
``_eagle_launch`` (``eagle.device``) for the argument types a launch with those planes would
pass it, for compute capability ``cc``, the way a launch compiles it:

* the launch dispatcher's own options (``launch_options``: debug/opt for a body that raises,
  ``lto``, fastmath, launch bounds, link files) -- read back from the dispatcher, since numba
  may not keep what it was given (numba-cuda 0.30's ``@cuda.jit(lto=False, ...)`` keeps lto
  on: the decorator form drops ``lto``);
* inside ``no_contraction(plugin)``, so NVVM gets ``fma=0`` unless ``@eagle.kernel(fma=True)``;
* numba's own steps of a launch compile (``numba.cuda.dispatcher._Kernel``): the kernel is
  lowered with ``compile_cuda``, fixed up as a kernel, and its PTX is what NVVM makes of it --
  or, when the launch links with LTO, what nvJitLink makes of the LTO-IR (``get_lto_ptx``), as
  the binary a launch runs comes from there;
* the target a launch on such a GPU uses: numba compiles for the arch-specific
  ``compute_90a`` on an H100/H200, so ``cc=(9, 0)`` gives ``.target sm_90a``; pass
  ``(9, 0, "")`` for the portable ``sm_90``.

The body, its helpers and the row-partial fold are separate CUDA device functions; numba
compiles a device function for "the current device", which asks the driver for its compute
capability.  Here there is none, so while compiling, numba's dispatcher is told the current
device has compute capability ``cc`` (under numba's compiler lock).  Device functions keep
one compilation per argument types for the process (numba's rule on every GPU, too); a later
launch reuses them.
"""
from __future__ import annotations

import contextlib
import os

import numpy as np

from .bind import bind
from .device import cuda_module, device_entry
from .device_codegen import no_contraction


def device_ptx(plugin, cc=(9, 0), **planes) -> str:
    """The PTX of ``plugin``'s launch kernel for ``planes`` (arrays give their dtype and
    dimensions, Params their numba type) on compute capability ``cc``; needs numba-cuda's
    compiler (``pip install 'numba-cuda[cu12]'``), not a GPU."""
    target = target_cc(plugin.name, cc)
    argtypes = launch_types(plugin, planes)
    cuda = cuda_module()
    if _simulated():
        raise RuntimeError(f"kernel {plugin.name!r}: numba's CUDA simulator (NUMBA_ENABLE_CUDASIM) makes no PTX; "
                           "unset it before numba is imported")
    if getattr(cuda, "implementation", "NVIDIA") != "NVIDIA":
        raise RuntimeError(f"kernel {plugin.name!r}: device_ptx needs numba-cuda, not numba's "
                           f"{cuda.implementation.lower()} CUDA target: pip install 'numba-cuda[cu12]'")
    launch = device_entry(plugin).launch
    opts = dict(launch.targetoptions)
    try:
        with _current_device(target[:2]), no_contraction(plugin):
            lib = _kernel_library(launch.py_func, argtypes, opts, target[:2])
            if opts.get("lto"):
                return lib.get_lto_ptx(cc=target)
            return lib.get_asm_str(cc=target)
    except Exception as e:  # noqa: BLE001 - numba's typing and NVVM errors, named with the kernel
        first = " ".join(line.strip() for line in str(e).strip().splitlines() if line.strip())
        raise RuntimeError(f"kernel {plugin.name!r}: its launch kernel did not compile for "
                           f"compute_{target[0]}{target[1]}{target[2]} ({type(e).__name__}: {first[:2000]})") from e


def target_cc(kernel: str, cc) -> tuple:
    """``(major, minor, suffix)``: a launch's target for a GPU of compute capability ``cc``
    (numba picks the arch-specific ``a`` from 9.0 on); a 3-tuple is taken as given."""
    ok = isinstance(cc, tuple) and len(cc) in (2, 3) and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0 for v in cc[:2])
    if ok and len(cc) == 3:
        ok = cc[2] in ("", "a", "f")
    if not ok:
        raise ValueError(f"kernel {kernel!r}: cc={cc!r}: give a compute capability as (major, minor), "
                         "e.g. (9, 0) for H100/H200 or (8, 0) for A100, or (major, minor, suffix) with "
                         "suffix '', 'a' or 'f'")
    major, minor = int(cc[0]), int(cc[1])
    if len(cc) == 3:
        return major, minor, cc[2]
    return major, minor, "a" if (major, minor) >= (9, 0) else ""


def launch_types(plugin, planes: dict) -> tuple:
    """numba types of ``_eagle_launch(base, stop, per, po, *arg_spec, err, row0)`` for ``planes``.

    The planes are bound by the rules of every run (``eagle.bind.bind``: an Out not given is the
    one eagle allocates, a Param not given its default); they are uploaded C-contiguous, so
    their dtype and number of dimensions count, not their sizes.  A cell is its ``(rows, 2)``
    float64 row partials, the bounds record a 1-D int64 array.
    """
    import numba
    from numba import types

    bound = bind(plugin, planes)
    index = numba.typeof(0)                              # base, stop, per, po, row0: Python ints
    args = [index] * 4
    for role, name in plugin.arg_spec:
        if role.kind == "Cell":
            args.append(types.Array(types.float64, 2, "C"))
        elif role.kind == "Param":
            args.append(numba.typeof(bound.values[name]))
        else:
            v = bound.values[name]
            args.append(types.Array(numba.from_dtype(v.dtype), v.ndim, "C"))
    args.append(types.Array(types.int64, 1, "C"))
    args.append(index)
    return tuple(args)


# -- numba's steps of a launch compile, for a compute capability instead of a device ---------

def _simulated() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


class _Capability:
    """Stands for "the current device" where numba only reads its compute capability."""

    def __init__(self, cc):
        self.compute_capability = tuple(cc)


def _compiler_lock():
    try:
        from numba.cuda.core.compiler_lock import global_compiler_lock
    except ImportError:                   # older numba-cuda shares numba's lock
        from numba.core.compiler_lock import global_compiler_lock
    return global_compiler_lock


@contextlib.contextmanager
def _current_device(cc):
    """While compiling, device functions compile for ``cc`` (numba asks the driver otherwise)."""
    from numba.cuda import dispatcher
    with _compiler_lock():
        real = dispatcher.get_current_device
        dispatcher.get_current_device = lambda: _Capability(cc)
        try:
            yield
        finally:
            dispatcher.get_current_device = real


def _kernel_library(py_func, argtypes, opts: dict, cc):
    """The code library of ``py_func`` as a kernel, as ``numba.cuda.dispatcher._Kernel`` makes it."""
    from numba import types
    from numba.cuda.compiler import compile_cuda, kernel_fixup
    from numba.cuda.cudadrv import nvvm

    debug = bool(opts.get("debug"))
    nvvm_options = {"fastmath": opts.get("fastmath", False), "opt": 3 if opts.get("opt", True) else 0}
    if debug:
        nvvm_options["g"] = None
    if opts.get("fma") is not None:         # a numba-cuda whose cuda.jit takes fma= (eagle passes it there)
        nvvm_options["fma"] = bool(opts["fma"])
    cres = compile_cuda(py_func, types.void, argtypes, debug=debug, lineinfo=opts.get("lineinfo", False),
                        forceinline=opts.get("forceinline", False), fastmath=opts.get("fastmath", False),
                        nvvm_options=nvvm_options, cc=cc, max_registers=opts.get("max_registers"),
                        lto=bool(opts.get("lto")))
    lib = cres.library
    kernel = lib.get_function(cres.fndesc.llvm_func_name)
    lib._entry_name = cres.fndesc.llvm_func_name
    kernel_fixup(kernel, debug)
    nvvm.set_launch_bounds(kernel, opts.get("launch_bounds"))
    for path in opts.get("link") or ():
        lib.add_linking_file(path)
    return lib
