"""DeviceKernel and plugin artifacts.

* Through numba's CUDA simulator (``tests/device_cases.py`` in its own process, since
  NUMBA_ENABLE_CUDASIM must be set before numba is imported): every kernel of the core suite
  at partitions 1, 2, 3 and odd bases equal bit for bit to one partition, and to HostTeam (the
  simulator runs the body as Python: no contraction, the host's math library, so all must match).
* In this process: placement refusals, the missing-CUDA explanations, artifacts.
* Marked ``gpu`` (skipped without a real NVIDIA GPU and CuPy): the same checks on CuPy inputs.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import eagle
import eagle.models
import eagle.exec as eexec
from eagle import plan as eplan
from eagle.device import placement
from tests.kernels import CASES, SPLITTABLE, as_dict, inputs, same_bits

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env.update(extra)
    return env


# -- the simulator -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def simulated():
    proc = subprocess.run([sys.executable, "-m", "tests.device_cases"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=_env(NUMBA_ENABLE_CUDASIM="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    by_case = {}
    for r in records:
        by_case.setdefault(r["case"], []).append(r)
    return by_case


@pytest.mark.parametrize("name", list(CASES))
def test_simulated_device_matches_host_and_every_split(simulated, name):
    records = simulated[name]
    checks = {r["check"] for r in records}
    assert "device == host" in checks
    if name in SPLITTABLE:      # 2 counts + 2 explicit layouts + 2 run_range splits
        assert sum("== one partition" in c for c in checks) == 6, checks
    bad = [r for r in records if not r["ok"]]
    assert not bad, bad


def test_simulated_small_n_errors_and_artifact(simulated):
    small = [r for r in simulated["axpb"] + simulated["reductions"] if r["check"].startswith("n=")]
    assert len(small) == 8 and all(r["ok"] for r in small), small
    (err,) = simulated["picky"]
    assert err["ok"], err["detail"]
    art = [r for r in simulated["oscillator"] if "artifact" in r["check"]]
    assert art and all(r["ok"] for r in art), art


# -- refusals that need no GPU -------------------------------------------------------------

class _Dev:
    """An array that says it lies on GPU ``ordinal`` (only what placement reads)."""

    def __init__(self, ordinal):
        self.__cuda_array_interface__ = {"shape": (4,), "typestr": "<f8", "data": (0, False), "version": 3}
        self.device = type("D", (), {"id": ordinal})()


def test_device_on_a_host_plan_is_refused():
    p = eplan.plan(CASES["axpb"][0], structure=eexec.HostTeam)
    with pytest.raises(ValueError, match=r"kernel 'axpb': device=0, but .*HostTeam runs on CPU threads"):
        p.run(device=0, **inputs("axpb", 5))


def test_planes_on_two_gpus_are_refused_by_name():
    with pytest.raises(ValueError, match=r"'x' on GPU 0, 'y' on GPU 1"):
        placement("k", {"x": _Dev(0), "y": _Dev(1)}, None)


def test_device_disagreeing_with_a_device_plane_is_refused_by_name():
    with pytest.raises(ValueError, match=r"plane 'x' lies on GPU 1, but device=0"):
        placement("k", {"x": _Dev(1), "a": 2.0}, 0)
    with pytest.raises(TypeError, match="by its number"):
        placement("k", {"x": np.zeros(3)}, "cuda:0")


def test_placement_follows_device_planes_and_device_choice():
    assert placement("k", {"x": _Dev(1), "y": np.zeros(4)}, None) == (1, True)
    assert placement("k", {"x": np.zeros(4)}, 1) == (1, False)
    assert placement("k", {"x": np.zeros(4)}, None) == (0, False)


_NO_CUDA = """
import numpy as np, eagle, eagle.exec as eexec
from eagle import plan as eplan
from tests.kernels import axpb
try:
    eplan.plan(axpb, structure=eexec.DeviceKernel).run(x=np.ones(3), a=1.0, b=0.0)
    print("RAN")
except RuntimeError as e:
    print("RuntimeError:", e)
"""


def test_no_cuda_driver_is_explained():
    proc = subprocess.run([sys.executable, "-c", _NO_CUDA], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    if "RAN" in proc.stdout:
        pytest.skip("this machine has a CUDA driver and a GPU")
    out = proc.stdout
    assert "RuntimeError: DeviceKernel" in out, out
    assert ("no usable CUDA driver" in out or "sees no GPU" in out), out
    assert "NUMBA_CUDA_DRIVER" in out or "CUDA_VISIBLE_DEVICES" in out, out


def test_missing_numba_cuda_is_explained():
    code = "import sys; sys.modules['numba.cuda'] = None\n" + _NO_CUDA
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "RuntimeError: DeviceKernel needs numba's CUDA target" in proc.stdout, proc.stdout
    assert "pip install 'eagle[cuda12]'" in proc.stdout, proc.stdout


_FIRST_ENTRY_AT_ONCE = """
import json, threading, time
import numpy as np, eagle, eagle.exec as eexec
from eagle import device as edev, plan as eplan
from tests.kernels import axpb

built = []
generate = edev.device_source
def slow_source(plugin):            # a wide window: a second build would start inside it
    built.append(threading.current_thread().name)
    time.sleep(0.2)
    return generate(plugin)
edev.device_source = slow_source

plugin = eagle.deploy(axpb)
x = np.linspace(-3.0, 5.0, 257)
barrier = threading.Barrier(8)
entries, launches, errors = {}, {}, []
def first(k):
    try:
        barrier.wait(timeout=60)
        entries[k] = edev.device_entry(plugin)
        entries[k].source               # what a Dask worker's task reads first (eagle_dask.task)
        launches[k] = entries[k].launch
    except BaseException as e:
        errors.append(repr(e))
threads = [threading.Thread(target=first, args=(k,), name=f"t{k}") for k in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join(240)
got = eplan.plan(plugin, structure=eexec.DeviceKernel).run(x=x, a=2.5, b=-1.25)   # the simulator runs one launch at a time
want = 2.5 * x - 1.25
print(json.dumps({"alive": sum(t.is_alive() for t in threads), "errors": errors, "built": len(built),
                  "entries": len({id(e) for e in entries.values()}), "got": len(entries),
                  "launches": len({id(f) for f in launches.values()}),
                  "same": bool(np.array_equal(np.asarray(got).view(np.uint64), want.view(np.uint64)))}))
"""


def test_first_device_entry_from_eight_threads_is_built_once():
    """Eight threads asking at once for the first device entry of one kernel (numba's CUDA
    simulator) get one entry, its source generated once and one launch kernel; the entry runs
    the numpy bits."""
    proc = subprocess.run([sys.executable, "-c", _FIRST_ENTRY_AT_ONCE], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=_env(NUMBA_ENABLE_CUDASIM="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["alive"] == 0 and r["errors"] == [], r
    assert (r["got"], r["entries"], r["built"], r["launches"]) == (8, 1, 1, 1), r
    assert r["same"], r


# -- artifacts -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(CASES))
def test_artifact_round_trip(tmp_path, name):
    plugin = eagle.deploy(CASES[name][0])
    loaded = eagle.load(plugin.save(tmp_path / name))
    m = json.loads((tmp_path / name / "manifest.json").read_text())
    for key in ("name", "schema", "arg_spec", "access", "op", "cells", "scalar_type", "source_hash", "frozen"):
        assert key in m, key
    assert loaded.key == plugin.key
    assert (loaded.name, loaded.arg_spec, loaded.exec_access, loaded.exec_op, loaded.cells,
            loaded.scalar_type) == (plugin.name, plugin.arg_spec, plugin.exec_access, plugin.exec_op,
                                    plugin.cells, plugin.scalar_type)
    run = lambda p: as_dict(p, eplan.plan(p, structure=eexec.HostTeam).run(**inputs(name, 45)))  # noqa: E731
    assert same_bits(run(loaded), run(plugin))


def test_artifact_of_another_schema_is_refused(tmp_path):
    path = eagle.deploy(CASES["axpb"][0]).save(tmp_path / "axpb")
    mpath = os.path.join(path, "manifest.json")
    m = json.load(open(mpath))
    m["schema"] = 99
    json.dump(m, open(mpath, "w"))
    with pytest.raises(ValueError, match=r"schema version 99, this eagle reads schema version 3"):
        eagle.load(path)


def test_artifact_with_edited_source_is_refused(tmp_path):
    path = eagle.deploy(CASES["axpb"][0]).save(tmp_path / "axpb")
    src = os.path.join(path, "kernel.py")
    with open(src, "a") as f:
        f.write("\n# edited\n")
    with pytest.raises(ValueError, match=r"source of kernel 'axpb' does not match the source_hash"):
        eagle.load(path)


# -- a real GPU ----------------------------------------------------------------------------

def _has_gpu() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device
        return False


needs_gpu = pytest.mark.skipif(not _has_gpu(), reason="needs an NVIDIA GPU with CuPy")

#: kernels made of + - * /, sqrt and integer arithmetic: the device gives the host's bits exactly
#: (no contraction).  'transcendental' and 'reductions' call exp/sin/cos/log, which come from
#: CUDA's libdevice on the GPU and the C library on the host: compared within 4 ulp instead.
EXACT_ON_GPU = ["axpb", "stencil", "histogram", "oscillator", "halvings", "vectors", "integers",
                "neighbour_sum"]
N_GPU = 1001


def _on_gpu(d):
    import cupy
    return {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in d.items()}


def _home(d):
    import cupy
    return {k: cupy.asnumpy(v) if isinstance(v, cupy.ndarray) else v for k, v in d.items()}


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("layout", [{"npartitions": 1}, {"npartitions": 2}, {"npartitions": 3},
                                    "odd"])
def test_gpu_cupy_planes_every_split(name, layout):
    import cupy
    plugin = eagle.deploy(CASES[name][0])
    if name not in SPLITTABLE and layout != {"npartitions": 1}:
        pytest.skip("cross_sample_write runs with one partition")
    if layout == "odd":
        layout = {"partitions": [(0, 64), (64, 320), (384, N_GPU - 384)] if plugin.cells
                  else [(0, 7), (7, 500), (507, N_GPU - 507)]}
    one = as_dict(plugin, eplan.plan(plugin, structure=eexec.DeviceKernel).run(**_on_gpu(inputs(name, N_GPU))))
    got = as_dict(plugin, eplan.plan(plugin, structure=eexec.DeviceKernel, **layout).run(
        **_on_gpu(inputs(name, N_GPU))))
    for o in plugin.names("Out", "Mutable"):
        assert isinstance(got[o], cupy.ndarray), f"output {o!r} left the device"
    got, one = _home(got), _home(one)
    assert same_bits(got, one)
    host = as_dict(plugin, eplan.plan(plugin, structure=eexec.HostTeam).run(**inputs(name, N_GPU)))
    if name in EXACT_ON_GPU:
        assert same_bits(got, host)
    else:
        for k in host:
            np.testing.assert_array_max_ulp(np.asarray(got[k]), np.asarray(host[k]), maxulp=4)


@pytest.mark.gpu
@needs_gpu
def test_gpu_device_selection_and_host_planes():
    import cupy
    count = cupy.cuda.runtime.getDeviceCount()
    p = eplan.plan(CASES["axpb"][0], structure=eexec.DeviceKernel, npartitions=3)
    d = inputs("axpb", 100003)
    y = p.run(device=count - 1, **d)
    assert isinstance(y, np.ndarray)
    assert same_bits(y, d["a"] * d["x"] + d["b"])        # a*x+b without contraction: numpy's bits
    with pytest.raises(ValueError, match=f"this process sees {count} GPU"):
        p.run(device=count, **inputs("axpb", 10))
    if count >= 2:
        with cupy.cuda.Device(1):
            x1 = cupy.asarray(d["x"])
        with pytest.raises(ValueError, match="plane 'x' lies on GPU 1, but device=0"):
            p.run(device=0, x=x1, a=1.0, b=0.0)
        with cupy.cuda.Device(0):
            y0 = cupy.zeros(x1.shape[0])
        with pytest.raises(ValueError, match="lie on different GPUs"):
            p.run(x=x1, y=y0, a=1.0, b=0.0)


@pytest.mark.gpu
@needs_gpu
def test_gpu_declared_fma_contracts():
    """fma=True lets NVVM fuse a*x+b; without it the bits are numpy's (checked above)."""
    @eagle.kernel(fma=True)
    def fused(i, x: eagle.In, a: eagle.Param, b: eagle.Param, y: eagle.Out):
        y[i] = a * x[i] + b

    x = np.random.default_rng(7).uniform(-3, 3, 100003)
    y = eplan.plan(fused, structure=eexec.DeviceKernel).run(x=x, a=0.1, b=-1.7)
    assert not same_bits(y, 0.1 * x + -1.7)              # some sample rounds differently when fused


def test_gpu_check_script_is_valid():
    """scripts/gpu_check.sh parses and the throughput script imports (they run only on a GPU)."""
    assert subprocess.run(["bash", "-n", os.path.join(ROOT, "scripts", "gpu_check.sh")]).returncode == 0
    import scripts.gpu_throughput as g
    assert g.stream is eagle.models.axpb and eagle.deploy(g.oscillator).cells == {"energy": "sum"}


@eagle.kernel(fma=True)
def fused_axpb(i, x: eagle.In, y: eagle.Out):
    y[i] = 2.0 * x[i] + 1.0


class _LaunchThatCompiles:
    """Stands in for the launch kernel numba compiles lazily at its first launch: calling it
    compiles, i.e. reaches ``nvvm.compile_ir`` through the module attribute as numba does."""

    def __init__(self, nvvm, raises=None):
        self.nvvm, self.raises = nvvm, raises

    def __getitem__(self, config):
        return self

    def __call__(self, *args):
        self.nvvm.compile_ir("launch kernel ir", opt=3)
        if self.raises is not None:
            raise self.raises


def test_nvvm_gets_fma_off_unless_declared(monkeypatch):
    """eagle's own launch path (DeviceEntry.run_partition inside no_contraction, with the hook
    _install_nvvm_hook puts on numba's nvvm.compile_ir) passes NVVM fma=False for a kernel not
    declared fma=True, and nothing else: not for fma=True, not outside eagle's launches, not with
    fastmath, not over an fma the caller chose, not in another thread.  No GPU is needed: the
    launch kernel is a stand-in that compiles when called, and NVVM a recorder."""
    import threading
    import types

    from eagle import device as edev
    from eagle import device_codegen as dc
    nvvm = pytest.importorskip("numba.cuda.cudadrv.nvvm",
                               reason="numba's CUDA target is not installed: no NVVM entry for eagle to hook")
    plain, fused = eagle.deploy(CASES["axpb"][0]), eagle.deploy(fused_axpb)
    assert "contraction: off" in dc.device_source(plain)
    assert "contraction: on" in dc.device_source(fused)
    if dc.jit_accepts("fma"):
        # this numba's cuda.jit takes fma= itself: eagle passes it there and leaves NVVM alone
        assert "fma=False" in dc.launch_options(plain) and "fma=True" in dc.launch_options(fused)
        with dc.no_contraction(plain):
            assert not getattr(nvvm.compile_ir, "_eagle_hook", False)
        return
    assert "fma=" not in dc.launch_options(plain)
    seen = []

    def recorder(llvmir, **options):
        seen.append((threading.current_thread().name, dict(options)))
        return b"ptx"
    monkeypatch.setattr(nvvm, "compile_ir", recorder)       # restored (without eagle's hook) afterwards
    monkeypatch.setattr(edev, "cuda_module", lambda: types.SimpleNamespace(synchronize=lambda: None))

    def launch(plugin, raises=None):
        entry = edev.DeviceEntry(plugin)
        entry._module = types.SimpleNamespace(_eagle_launch=_LaunchThatCompiles(nvvm, raises))
        entry.run_partition([], 0, 10, 0, 0)

    launch(plain)
    assert getattr(nvvm.compile_ir, "_eagle_hook", False), "no_contraction did not hook numba's compile_ir"
    hooked = nvvm.compile_ir
    launch(fused)
    nvvm.compile_ir("not eagle's", opt=3)
    launch(plain)
    assert nvvm.compile_ir is hooked, "the hook was installed twice"
    main = threading.current_thread().name
    assert seen == [(main, {"opt": 3, "fma": False}), (main, {"opt": 3}), (main, {"opt": 3}),
                    (main, {"opt": 3, "fma": False})]

    del seen[:]
    with dc.no_contraction(plain):
        nvvm.compile_ir("ir", opt=3, fastmath=True)           # fastmath asked for: left alone
        nvvm.compile_ir("ir", opt=3, fma=True)                # an explicit choice: kept
        other = threading.Thread(target=nvvm.compile_ir, args=("ir",), kwargs={"opt": 3}, name="other")
        other.start()
        other.join()                                          # another thread's compilation: untouched
    assert seen == [(main, {"opt": 3, "fastmath": True}), (main, {"opt": 3, "fma": True}), ("other", {"opt": 3})]

    del seen[:]
    with pytest.raises(ValueError, match=r"boom.*kernel 'axpb'"):
        launch(plain, raises=ValueError("boom"))
    nvvm.compile_ir("after a failed launch", opt=3)           # the switch is off again
    assert seen == [(main, {"opt": 3, "fma": False}), (main, {"opt": 3})]
