"""Out-of-range indices: an IndexError naming the kernel, the plane, the index and the sample --
never garbage, a wrapped negative index, a write past a plane, or a crash."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import In, Mutable, Out, Param
from eagle import plan as eplan
from tests.kernels import same_bits

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@eagle.kernel
def forward_difference(i, x: In, d: Out):
    d[i] = x[i + 1] - x[i]


@eagle.kernel
def previous(i, x: In, d: Out):
    d[i] = x[i - 1]


@eagle.kernel
def far(i, x: In, jump: Param, d: Out):
    d[i] = x[i + jump]


@eagle.kernel
def binned(i, x: In, counts: Mutable):
    counts[int(x[i])] += 1.0


@eagle.kernel
def widths(i, x: In, k: Param, q: Out[3]):
    q[i, 0] = x[i]
    q[i, k] = x[i]


@eagle.kernel
def gathered(i, src: In, idx: In, y: Out):
    y[i] = src[int(idx[i])]


def run(kernel, **planes):
    return eplan.plan(kernel, structure=eexec.HostTeam).run(**planes)


def message(exc_info):
    return str(exc_info.value)


@pytest.mark.parametrize("threads, npartitions", [(1, 1), (2, 1), (3, 3), (1, 7)])
def test_reading_past_the_last_sample(team, threads, npartitions):
    team(threads)
    with pytest.raises(IndexError) as info:
        eplan.plan(forward_difference, structure=eexec.HostTeam, npartitions=npartitions).run(x=np.arange(100.0))
    msg = message(info)
    assert "index 100 is out of range for plane 'x', which has 100 samples" in msg
    assert "[kernel 'forward_difference', sample 99]" in msg


def test_a_negative_index_does_not_wrap_around():
    with pytest.raises(IndexError) as info:
        run(previous, x=np.arange(10.0))
    assert "index -1 is out of range for plane 'x'" in message(info) and "sample 0]" in message(info)


@pytest.mark.parametrize("jump", [10 ** 9, -(10 ** 9), 2 ** 62])
def test_a_far_index_is_an_index_error_not_a_crash(jump):
    with pytest.raises(IndexError) as info:
        run(far, x=np.arange(64.0), jump=jump)
    assert f"index {jump} is out of range for plane 'x'" in message(info)


def test_nothing_is_written_past_a_plane():
    buf = np.full(60, -7.0)
    counts = buf[:50]                                   # the plane; buf[50:] is the memory after it
    x = np.array([3.0, 49.0, 50.0, 55.0, 2.0])
    padded = np.zeros(50)
    padded[:5] = x
    with pytest.raises(IndexError) as info:
        run(binned, x=padded, counts=counts)
    assert "index 50 is out of range for plane 'counts', which has 50 samples" in message(info)
    assert "sample 2]" in message(info)                 # the first bad sample, not the last
    assert same_bits(buf[50:], np.full(10, -7.0))


def test_a_vector_plane_width_is_checked():
    buf = np.full(40 * 3 + 6, -7.0)
    q = buf[:120].reshape(40, 3)
    with pytest.raises(IndexError) as info:
        run(widths, x=np.arange(40.0), k=3, q=q)
    msg = message(info)
    assert "index 3 is out of range for plane 'q', which has 3 entries on axis 1" in msg and "sample 0]" in msg
    assert same_bits(buf[120:], np.full(6, -7.0))
    with pytest.raises(IndexError, match="index -1 is out of range for plane 'q'"):
        run(widths, x=np.arange(40.0), k=-1, q=np.zeros((40, 3)))


def test_the_first_bad_sample_in_sample_order_is_reported(team):
    """Bad samples in several chunks run by several threads: the first in sample order wins."""
    team(3)
    n = 3000
    idx = np.zeros(n)
    idx[[2500, 1900, 777, 2999]] = n + 5
    with pytest.raises(IndexError) as info:
        eplan.plan(gathered, structure=eexec.HostTeam).run(src=np.arange(float(n)), idx=idx)
    assert "[kernel 'gathered', sample 777]" in message(info)


def test_in_range_neighbours_keep_their_bits_and_their_lanes(team):
    """The stencil reads four neighbours, all checked: numpy's bits, and still laned."""
    from eagle.models import stencil
    team(2)
    x = np.random.default_rng(5).uniform(-1, 1, 1001)
    got = eplan.plan(stencil, structure=eexec.HostTeam, npartitions=3).run(x=x)
    p = np.pad(x, 2, mode="edge")
    want = ((p[:-4] + p[1:-3]) + p[2:-2] + p[3:-1] + p[4:]) / 5.0
    assert same_bits(got, want)
    assert eagle.deploy(stencil).host_path != "one"


def test_the_device_reports_the_same_index_error(tmp_path):
    """A device kernel cannot raise: it flags the access, and the host raises after the launch
    (numba's CUDA simulator, in its own process)."""
    script = tmp_path / "device_bounds.py"
    script.write_text(textwrap.dedent("""
        import json
        import numpy as np
        import eagle.exec as eexec
        from eagle import plan as eplan
        from tests.test_bounds import forward_difference, widths
        got = {}
        for name, kernel, planes in [("diff", forward_difference, {"x": np.arange(100.0)}),
                                     ("width", widths, {"x": np.arange(40.0), "k": 3})]:
            try:
                eplan.plan(kernel, structure=eexec.DeviceKernel, npartitions=2).run(**planes)
                got[name] = "ran"
            except IndexError as e:
                got[name] = str(e)
        print(json.dumps(got))
    """))
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert "index 100 is out of range for plane 'x'" in got["diff"]
    assert "[kernel 'forward_difference', sample 99 on the device]" in got["diff"]
    assert "index 3 is out of range for plane 'q', which has 3 entries on axis 1" in got["width"]


def test_a_dask_worker_gets_an_index_error_not_a_segfault():
    eagle_dask = pytest.importorskip("eagle_dask")
    with eagle_dask.local_cluster(n_workers=2) as client:
        structure = eagle_dask.DaskPartition.on(client, progress=False)
        with pytest.raises(IndexError) as info:
            eplan.plan(far, structure=structure).run(x=np.arange(64.0), jump=10 ** 9)
    msg = message(info)
    assert re.search(r"index 10000000\d\d is out of range for plane 'x', which has 64 samples", msg), msg
    assert "kernel 'far', sample" in msg and ", rank " in msg


def _pick(x, k):
    return x[k]


@eagle.kernel
def via_helper(i, x: In, y: Out):
    y[i] = _pick(x, i + 1)


def test_a_plane_indexed_inside_a_helper_compiled_with_the_kernel_is_checked_too():
    """A plane passed to a helper is indexed outside the body's rewrite; eagle compiles such helpers
    with numba's own bounds checks."""
    with pytest.raises(IndexError) as info:
        run(via_helper, x=np.arange(10.0))
    assert "index is out of bounds" in message(info) and "[kernel 'via_helper'" in message(info)
