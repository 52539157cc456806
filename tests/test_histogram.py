"""A histogram's bins: an output plane the body touches only at indices it computes is not a
per-sample plane, so it has as many bins as the caller gives (docs/kernels.md), every index into it
checked, on the host and on the device (through numba's CUDA simulator, in its own process)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import In, Mutable, Out
from eagle import plan as eplan
from eagle.bits import same_bits

NBINS = 10


@eagle.kernel
def binned(i, x: In, counts: Mutable):
    nb = counts.shape[0]
    b = int(x[i] * nb)
    if b >= nb:
        b = nb - 1
    counts[b] += 1.0


@eagle.kernel
def binned_out(i, x: In, w: In, counts: Out):
    counts[int(x[i] * counts.shape[0])] += w[i]


@eagle.kernel
def unclamped(i, x: In, counts: Mutable):
    counts[int(x[i] * 20.0)] += 1.0


def reference(x, nbins, weights=None):
    """Plain numpy: the bin of each sample, counted."""
    b = np.minimum((x * nbins).astype(np.int64), nbins - 1)
    return np.bincount(b, weights=weights, minlength=nbins).astype(np.float64)


@pytest.mark.parametrize("n", [0, 1, 33, 1001])
@pytest.mark.parametrize("threads", ["1", "3"])
def test_bins_fewer_than_samples_on_the_host(n, threads, monkeypatch):
    monkeypatch.setenv("EAGLE_NUM_THREADS", threads)
    x = np.random.default_rng(n).random(n)
    counts = np.zeros(NBINS)
    out = eplan.plan(eagle.deploy(binned), structure=eexec.HostTeam).run(x=x, counts=counts)
    assert out.shape == (NBINS,)
    assert same_bits(out, reference(x, NBINS))
    assert same_bits(counts, reference(x, NBINS)), "a Mutable is updated in place"


@pytest.mark.parametrize("nbins", [1, 7, 2000])
def test_a_supplied_out_has_its_own_length(nbins):
    rng = np.random.default_rng(nbins)
    x, w = rng.random(500), rng.random(500)
    counts = np.zeros(nbins)
    eplan.plan(eagle.deploy(binned_out), structure=eexec.HostTeam).run(x=x, w=w, counts=counts)
    # weights added in sample order, as one process adds them
    want = np.zeros(nbins)
    for xi, wi in zip(x, w):
        want[int(xi * nbins)] += wi
    assert same_bits(counts, want)


def test_a_bin_past_the_end_is_an_index_error_naming_the_plane():
    x = np.array([0.1, 0.7])
    with pytest.raises(IndexError) as e:
        eplan.plan(eagle.deploy(unclamped), structure=eexec.HostTeam).run(x=x, counts=np.zeros(NBINS))
    text = str(e.value)
    assert "'counts'" in text and "14" in text and "unclamped" in text and "sample 1" in text


def test_sample_planes_still_agree_and_one_is_needed():
    with pytest.raises(ValueError, match="different sample counts: 'x' has 5, 'w' has 4"):
        eplan.plan(eagle.deploy(binned_out), structure=eexec.HostTeam).run(
            x=np.zeros(5), w=np.zeros(4), counts=np.zeros(3))


def test_bins_are_one_partition_only():
    with pytest.raises(ValueError, match="cross_sample_write"):
        eplan.plan(eagle.deploy(binned), structure=eexec.HostTeam, npartitions=2)


_SIMULATED = """
import json, numpy as np, eagle, eagle.exec as eexec
from eagle import plan as eplan
from tests.test_histogram import binned, reference, NBINS
x = np.random.default_rng(5).random(77)
counts = np.zeros(NBINS)
got = eplan.plan(eagle.deploy(binned), structure=eexec.DeviceKernel).run(x=x, counts=counts)
print(json.dumps({"got": np.asarray(got).tolist(), "want": reference(x, NBINS).tolist()}))
"""


def test_bins_on_the_device_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", _SIMULATED], env=env, cwd=root, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rec["got"] == rec["want"]


@eagle.kernel
def smear(i, x: In, m: Mutable):
    m[i] += x[i]
    if i > 0:
        m[i - 1] += x[i]


def test_a_plane_also_touched_at_its_own_sample_is_a_sample_plane():
    x = np.arange(6.0)
    m = np.zeros(4)
    with pytest.raises(ValueError, match="different sample counts: 'x' has 6, 'm' has 4"):
        eplan.plan(eagle.deploy(smear), structure=eexec.HostTeam).run(x=x, m=m)
    assert same_bits(m, np.zeros(4)), "refused before anything ran"
    m = np.zeros(6)
    eplan.plan(eagle.deploy(smear), structure=eexec.HostTeam).run(x=x, m=m)
    want = np.zeros(6)
    for i in range(6):
        want[i] += x[i]
        if i > 0:
            want[i - 1] += x[i]
    assert same_bits(m, want)
