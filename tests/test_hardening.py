"""Inputs a hostile but fair user would try: each ends in a clear refusal or in the right result."""
from __future__ import annotations

import inspect
import math
import re
import time

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import Cell, In, Out, Param
from eagle import plan as eplan
from tests.kernels import same_bits


def line_of(kernel, text):
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


# --- constructs a kernel body does not support: refused at deploy, by name and line -----------------
@eagle.kernel
def generator(i, x: In, y: Out):
    y[i] = x[i]
    yield 1


@eagle.kernel
def nested_def(i, x: In, y: Out):
    def twice(v):
        return 2.0 * v
    y[i] = twice(x[i])


@eagle.kernel
def nested_lambda(i, x: In, y: Out):
    twice = lambda v: 2.0 * v  # noqa: E731
    y[i] = twice(x[i])


@eagle.kernel
def catches(i, x: In, y: Out):
    try:
        y[i] = 1.0 / x[i]
    except ZeroDivisionError:
        y[i] = 0.0


@eagle.kernel
def opens(i, x: In, y: Out):
    with open("data") as f:  # noqa: F841
        y[i] = x[i]


@eagle.kernel
def imports(i, x: In, y: Out):
    import math
    y[i] = math.sqrt(x[i])


@pytest.mark.parametrize("kernel, what, where", [
    (generator, "yield", "yield 1"),
    (nested_def, "a nested function", "def twice"),
    (nested_lambda, "a nested function", "lambda v"),
    (catches, "try/except", "try:"),
    (opens, "with", "with open"),
    (imports, "import", "import math"),
])
def test_unsupported_constructs_are_refused_at_deploy(kernel, what, where):
    with pytest.raises(ValueError) as info:
        eagle.deploy(kernel)
    msg = str(info.value)
    assert f"kernel {kernel.name!r}, line {line_of(kernel, where)}" in msg
    assert f"the body uses {what}" in msg
    assert "returns nothing" not in msg or kernel is generator


# --- range takes integers, as in Python ---------------------------------------------------------
@eagle.kernel
def float_range(i, x: In, y: Out):
    for _ in range(10.5):
        y[i] += x[i]


@eagle.kernel
def repeat(i, x: In, steps: Param, y: Out):
    for _ in range(steps):
        y[i] += x[i]


def test_a_float_literal_in_range_is_refused_at_deploy():
    with pytest.raises(TypeError, match=rf"kernel 'float_range', line {line_of(float_range, 'range(10.5)')}: "
                                        r"range\(10.5\)"):
        eagle.deploy(float_range)


@pytest.mark.parametrize("steps", [10.5, np.float64(3.0), 2.0])
def test_a_float_param_passed_to_range_is_refused_with_the_arrays_untouched(steps):
    x, y = np.ones(4), np.full(4, 7.0)
    with pytest.raises(TypeError, match=r"Param 'steps' of kernel 'repeat' is passed to range\(\) and must be "
                                        r"an integer"):
        eplan.plan(repeat, structure=eexec.HostTeam).run(x=x, steps=steps, y=y)
    assert same_bits(y, np.full(4, 7.0)) and same_bits(x, np.ones(4))


@pytest.mark.parametrize("steps", [3, np.int64(3), np.uint8(3)])
def test_integer_params_passed_to_range_run(steps):
    y = eplan.plan(repeat, structure=eexec.HostTeam).run(x=np.full(5, 0.5), steps=steps, y=np.zeros(5))
    assert same_bits(y, np.full(5, 1.5))


# --- numpy integers are integers; far too many partitions cost nothing ------------------------------
@eagle.kernel
def affine(i, x: In, a: Param, b: Param, y: Out):
    y[i] = a * x[i] + b


def test_numpy_integer_partitions():
    x = np.arange(10.0)
    want = 2.0 * x + 1.0
    for kw in ({"npartitions": np.int64(4)}, {"npartitions": np.uint16(3)},
               {"partitions": [(np.int64(0), np.int32(4)), (np.int64(4), 6)]}):
        assert same_bits(eplan.plan(affine, structure=eexec.HostTeam, **kw).run(x=x, a=2.0, b=1.0), want)


def test_far_more_partitions_than_samples_is_the_same_cut_without_allocating_them():
    x = np.arange(10.0)
    t = time.perf_counter()
    got = eplan.plan(affine, structure=eexec.HostTeam, npartitions=10 ** 8).run(x=x, a=2.0, b=1.0)
    assert time.perf_counter() - t < 10.0          # was 38 s and a MemoryError
    assert same_bits(got, 2.0 * x + 1.0)
    cut = eplan.plan(affine, structure=eexec.HostTeam, npartitions=10 ** 8).partitions_for(10)
    assert [(p.base, p.count) for p in cut] == [(k, 1) for k in range(10)]


# --- RankPartition.local validates the partition it is given ---------------------------------------
@pytest.mark.parametrize("partition, exc, rule", [
    ((0, -3, 10), ValueError, "0 <= count"),
    ((-1, 3, 10), ValueError, "0 <= base"),
    ((8, 5, 10), ValueError, "base + count <= n_samples"),
    ((0, 2.5, 10), TypeError, "integers"),
    ((0, 3), TypeError, "is not a Partition"),
])
def test_rank_partition_local_refuses_a_bad_partition(partition, exc, rule):
    if not eexec.RankPartition.available:
        pytest.skip("mpi4py is not installed")
    with pytest.raises(exc, match=re.escape(rule)):
        eexec.RankPartition.local(partition)


def test_rank_partition_local_alone_is_the_whole_partition():
    if not eexec.RankPartition.available:
        pytest.skip("mpi4py is not installed")
    assert tuple(eexec.RankPartition.local((np.int64(3), 7, 10))) == (3, 7, 10)


# --- generated code never clashes with the user's names -------------------------------------------
@eagle.kernel
def clashing(i, x: In, min: Param, max: Param, range: Param, total: Cell["sum"], y: Out):
    y[i] = x[i] * min + max - range
    total[i] = x[i]


def test_params_named_like_builtins_beside_a_cell(team):
    team(2)
    x = np.arange(100.0)
    out = eplan.plan(clashing, structure=eexec.HostTeam, npartitions=3).run(x=x, min=2.0, max=1.0, range=0.5)
    assert same_bits(out["y"], x * 2.0 + 1.0 - 0.5)
    assert out["total"] == math.fsum(x)


def test_params_named_like_builtins_on_the_device(tmp_path):
    """The same kernel through the device's generated launch (numba's CUDA simulator)."""
    import json
    import os
    import subprocess
    import sys
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = tmp_path / "clash_device.py"
    script.write_text(
        "import json\nimport numpy as np\nimport eagle.exec as eexec\nfrom eagle import plan as eplan\n"
        "from tests.test_hardening import clashing\n"
        "out = eplan.plan(clashing, structure=eexec.DeviceKernel, npartitions=2).run(\n"
        "    x=np.arange(100.0), min=2.0, max=1.0, range=0.5)\n"
        "print(json.dumps({'y': out['y'].tolist(), 'total': float(out['total'])}))\n")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=repo)
    done = subprocess.run([sys.executable, str(script)], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    x = np.arange(100.0)
    assert got["y"] == (x * 2.0 + 1.0 - 0.5).tolist() and got["total"] == math.fsum(x)


# --- planes numba cannot type: refused by bind, naming the plane --------------------------------------
@eagle.kernel
def doubled(i, x: In, y: Out):
    y[i] = 2.0 * x[i]


def test_a_two_dimensional_plane_indexed_as_one_value_per_sample():
    x, y = np.ones((6, 2)), np.full(6, 3.0)
    with pytest.raises(ValueError, match=re.escape("plane 'x' of kernel 'doubled' is indexed as x[i] (one value "
                                                   "per sample) and must be (n,), but it has shape (6, 2)")):
        eplan.plan(doubled, structure=eexec.HostTeam).run(x=x, y=y)
    assert same_bits(y, np.full(6, 3.0))


def test_an_object_plane():
    with pytest.raises(TypeError, match="plane 'x' of kernel 'doubled' holds object values"):
        eplan.plan(doubled, structure=eexec.HostTeam).run(x=np.array([object()] * 4))


# --- a kernel numba cannot compile for the arguments given --------------------------------------
@eagle.kernel
def halves(i, x: In, y: Out):
    v = x[i] * 0.5
    y[i] = v


def test_a_typing_failure_is_a_short_error_naming_the_kernel_line_and_types():
    from numba.core.errors import TypingError
    plugin = eagle.deploy(halves)
    path_before = eagle.host.host_entry(plugin).path
    with pytest.raises(TypeError) as info:
        eplan.plan(plugin, structure=eexec.HostTeam).run(x=np.arange(4) + 1j)
    msg = str(info.value)
    assert msg.startswith(f"kernel 'halves', line {line_of(halves, 'y[i] = v')} cannot be compiled for the "
                          "arguments given (x: In array(complex128, 1d, C), y: Out array(float64, 1d, C)")
    assert "numba says: No implementation of function" in msg
    assert "eagle_host_" not in msg                       # not a path to the generated file
    assert isinstance(info.value.__cause__, TypingError)
    # the failed types did not demote the kernel: a good run keeps its fast path, and its bits
    entry = eagle.host.host_entry(plugin)
    assert entry.path == path_before and entry.path != "one"
    x = np.linspace(-1.0, 1.0, 301)
    assert same_bits(eplan.plan(plugin, structure=eexec.HostTeam).run(x=x), x * 0.5)
    assert eagle.host.host_entry(plugin).path == path_before
