"""The device engine: samples of a plugin run on a GPU, through numba's CUDA target.

One CUDA launch per partition (the ``DeviceKernel`` structure, ``eagle.local``, is what runs a
plan's partitions through it); thread ``t`` runs sample ``base + t`` (a row of 32 samples for
a kernel with cells, whose rows are folded in ascending sample order and then, on the host,
in ascending row order with ``eagle.reduction.fold`` -- the same bits at every partitioning,
never atomics).  The launch kernel is generated from the same rewritten body as the host's
(see ``eagle.device_codegen``), compiled lazily on first use, once per process, device and
plugin (numba keeps one binary per GPU).

Planes: CuPy arrays (and any ``__cuda_array_interface__`` array) are used where they lie and
eagle-allocated outputs stay on that device (CuPy arrays when CuPy is importable); host
arrays are uploaded and their results copied back in place, so host inputs give numpy
outputs.  ``device=n`` picks the GPU for host inputs and must agree with device inputs.

What bits to expect.  Device against device: identical at every partitioning and on every GPU
of one architecture.  Device against the host: identical for kernels built from ``+ - * /``,
``sqrt``, comparisons and integer arithmetic (IEEE-754 correctly rounded on both, and eagle
compiles the device code without FMA contraction unless ``@eagle.kernel(fma=True)``);
transcendental functions (``exp``, ``sin``, ``log``...) come from CUDA's libdevice on the GPU
and from the C library on the host, and may differ in the last bit.  numba's CUDA simulator
runs the body as Python, so there everything equals the host.
"""
from __future__ import annotations

import os
import re
import threading

import numpy as np

from .bind import is_array
from .bounds import first, index_error, new_record
from .cache import load_module
from .device_codegen import device_source, no_contraction, samples_per_thread
from .entries import Entries
from .errors import kernel_error, message, retyped
from .roles import OUTPUT_KINDS
from .rows import check_row_start, identity_rows

INSTALL = "pip install 'eagle[cuda12]'"
BLOCK = 128
_ENTRIES = Entries()          # one entry per plugin key (eagle.entries)


# -- the CUDA runtime, explained when missing -------------------------------------------------

def simulated() -> bool:
    """Whether numba's CUDA simulator stands in for the GPU (``NUMBA_ENABLE_CUDASIM``)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def cuda_module():
    """numba's CUDA target, or a RuntimeError that says what to install or check."""
    try:
        from numba import cuda
    except ImportError as e:
        raise RuntimeError(f"DeviceKernel needs numba's CUDA target (numba-cuda), which is not "
                           f"installed ({e}): {INSTALL}") from None
    return cuda


def check_gpu(device=None):
    """Raise a RuntimeError naming the missing piece: the CUDA driver, or a visible GPU."""
    cuda = cuda_module()
    if simulated():
        if device is not None and not 0 <= device < len(cuda.gpus):
            raise ValueError(f"device={device!r}: numba's CUDA simulator has one GPU, number 0")
        return cuda
    try:
        count = len(cuda.gpus)
    except Exception as e:  # noqa: BLE001 - numba raises CudaSupportError and friends
        first = str(e).strip().splitlines()
        raise RuntimeError(
            "DeviceKernel found no usable CUDA driver (libcuda): install the NVIDIA driver, or point "
            f"NUMBA_CUDA_DRIVER at libcuda.so; then {INSTALL} for the CUDA 12 libraries "
            f"(numba said: {' '.join(l.strip() for l in first if l.strip())[:200]})") from None
    if count == 0:
        raise RuntimeError("DeviceKernel sees no GPU: the CUDA driver is present but no device is visible; "
                           "check nvidia-smi and CUDA_VISIBLE_DEVICES")
    if device is not None and not 0 <= device < count:
        raise ValueError(f"device={device!r}: this process sees {count} GPU(s), numbered 0 to {count - 1}")
    return cuda


# -- where planes lie ------------------------------------------------------------------------

def on_device(v) -> bool:
    return hasattr(v, "__cuda_array_interface__")


def device_of(v):
    """The GPU ordinal of a device array (CuPy's ``.device.id``), or None when it cannot tell."""
    d = getattr(v, "device", None)
    for attr in ("id", "device_id"):
        if d is not None and isinstance(getattr(d, attr, None), int):
            return getattr(d, attr)
    return d if isinstance(d, int) and not isinstance(d, bool) else None


def placement(kernel: str, planes: dict, device):
    """The GPU a run uses: ``device=`` or where its device planes lie; refusals name the planes."""
    if device is not None and (isinstance(device, bool) or not isinstance(device, (int, np.integer))):
        raise TypeError(f"device={device!r}: pick a GPU by its number (0, 1, ...)")
    where = {name: device_of(v) for name, v in planes.items() if on_device(v)}
    known = {name: d for name, d in where.items() if d is not None}
    if len(set(known.values())) > 1:
        desc = ", ".join(f"{n!r} on GPU {d}" for n, d in known.items())
        raise ValueError(f"kernel {kernel!r}: device planes lie on different GPUs ({desc}); one launch runs "
                         "on one GPU: move them to one device")
    if device is not None:
        device = int(device)
        for name, d in known.items():
            if d != device:
                raise ValueError(f"kernel {kernel!r}: plane {name!r} lies on GPU {d}, but device={device}; "
                                 f"pass device={d} or move the plane")
        return device, bool(where)
    return (next(iter(known.values())) if known else 0), bool(where)


def device_zeros(device: int):
    """An ``alloc`` for ``eagle.plan.bind`` that puts eagle-allocated outputs on GPU ``device``."""
    def alloc(shape, dtype):
        try:
            import cupy
        except ImportError:
            cuda = check_gpu(device)
            with cuda.gpus[device]:
                return cuda.to_device(np.zeros(shape, dtype=dtype))
        with cupy.cuda.Device(device):
            return cupy.zeros(shape, dtype=dtype)
    return alloc


# -- the compiled entry ----------------------------------------------------------------------

class DeviceEntry:
    """The generated launch kernel of one plugin (one per process, keyed by the plugin's hash,
    built by ``device_entry``): its source generated when the entry is built (that needs numba's
    CUDA target: its options depend on it), its module loaded and compiled on first launch."""

    def __init__(self, plugin):
        self.plugin = plugin
        cuda_module()
        self.source = device_source(plugin)         # the generated module's text
        self._module = None
        self._lock = threading.Lock()

    @property
    def launch(self):
        with self._lock:
            if self._module is None:
                self._module = load_module("device", self.plugin, self.source)
        return self._module._eagle_launch

    def run_partition(self, args: list, start: int, stop: int, po: int, row0: int):
        """One launch over samples ``[start, stop)`` (device arrays in ``args``)."""
        count = stop - start
        if count <= 0:
            return
        p = self.plugin
        per = samples_per_thread(p, count)
        threads = -(-count // per)
        block = BLOCK                     # whole blocks: threads past stop meet the bounds guard
        grid = -(-threads // block)
        try:
            with no_contraction(p):
                self.launch[grid, block](start, stop, per, po, *args, row0)
                cuda_module().synchronize()
        except Exception as e:  # noqa: BLE001 - the body's exception, named with the kernel
            raise _body_error(p.name, e, start, stop, per, block) from e

    def run(self, values: dict, parts, po: int = 0, device: int = 0, row_range=None, copy_back=None) -> dict:
        """Run each ``(start, stop)`` of ``parts`` as one launch on GPU ``device``.

        Host planes are uploaded and the output planes among them copied back (the samples of
        ``copy_back`` = ``(start, stop)``, or all); device planes are used in place.  Returns
        each cell's row partials for the rows ``row_range`` = ``[r0, r1)`` as host arrays.
        """
        p = self.plugin
        for start, stop in parts:
            check_row_start(start, stop, bool(p.cells), p.name)
        cuda = check_gpu(device)
        r0, r1 = row_range if row_range is not None else (0, 0)
        outputs = set(p.names(*OUTPUT_KINDS))
        with cuda.gpus[device]:
            dev, back = {}, []
            for role, name in p.arg_spec:
                if role.kind == "Cell":
                    dev[name] = cuda.to_device(identity_rows(role.op, r1 - r0))
                    continue
                v = values[name]
                if is_array(v) and not on_device(v):
                    host = np.ascontiguousarray(v)
                    dev[name] = cuda.to_device(host)
                    if name in outputs:
                        back.append(name)
                else:
                    dev[name] = v
            bad = cuda.to_device(new_record(1))
            args = [dev[name] for _, name in p.arg_spec] + [bad[0]]
            for start, stop in parts:
                self.run_partition(args, start, stop, po, r0)
            record = first(bad.copy_to_host())
            if record is not None:                   # a device kernel cannot raise: it flagged
                raise kernel_error(p.name, index_error(p, record), f"sample {int(record[0])} on the device")
            for name in back:
                self._copy_home(name, dev[name], values[name], po, copy_back)
            return {c: dev[c].copy_to_host() for c in p.cells}

    def _copy_home(self, name, dev, host, po, span):
        if span is None:
            dev.copy_to_host(host)
            return
        off = po if name in self.plugin.sliceable else 0
        a, b = span[0] - off, span[1] - off
        if b > a:
            host[a:b] = dev[a:b].copy_to_host()


_WHERE = re.compile(r"^tid=\[(\d+)[^\]]*\] ctaid=\[(\d+)[^\]]*\]: ")


def _body_error(kernel, exc, start, stop, per, block):
    """The body's exception (numba reports it from a debug kernel as ``tid=[..] ctaid=[..]: msg``)."""
    msg = message(exc)
    m = _WHERE.match(msg)
    where = f"a sample in [{start}, {stop}) on the device"
    if m:
        lo = start + (int(m.group(2)) * block + int(m.group(1))) * per
        where = (f"sample {lo} on the device" if per == 1 else
                 f"a sample in [{lo}, {min(lo + per, stop)}) on the device")
        bare = retyped(type(exc), msg[m.end():])
        if isinstance(bare, type(exc)):          # else keep the original, prefix and all
            exc = bare
    return kernel_error(kernel, exc, where)


def device_entry(plugin) -> DeviceEntry:
    """The one device entry of ``plugin`` in this process: built (its source generated) by the
    first thread that asks, under a lock of its own key so threads asking for other kernels do not
    wait, found by the others; compiled on first launch per GPU."""
    return _ENTRIES.get(plugin, DeviceEntry)
