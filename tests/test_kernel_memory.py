"""A kernel body reaches no memory but its samples': a plane is reached only by its own name
(aliases, slices, chained subscripts refused at deploy and at load, naming the kernel and the line),
and every index of an array the body makes is checked on every host path and the device -- an
IndexError naming the array, the caller's arrays untouched, never a crash."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import eagle
from eagle import In, Out, Param
from eagle.plugin import field_hashes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@eagle.kernel
def carrier(i, x: In, j: Param, y: Out):
    y[i] = x[i] + j


ATTACKS = {   # body of carrier(i, x: In, j: Param, y: Out), the refusal expected
    "alias": ("    z = x\n    z[j] = 1.0\n    y[i] = x[i]\n", r"plane 'x' is used other than by its own name"),
    "alias_out": ("    z = y\n    z[j] = x[i]\n", r"plane 'y' is used other than by its own name"),
    "slice": ("    z = x[1:]\n    y[i] = z[j]\n", r"slices plane 'x'"),
    "slice_chain": ("    y[i] = x[i:][j]\n", r"x\[i:\]\[j\] indexes an expression"),
    "chain": ("    y[i] = x[i][j]\n", r"x\[i\]\[j\] indexes an expression"),
    "method": ("    x.fill(0.0)\n    y[i] = x[i]\n", r"plane 'x' is used other than by its own name"),
    "iterate": ("    s = 0.0\n    for v in x:\n        s += v\n    y[i] = s\n",
                r"plane 'x' is used other than by its own name"),
}


def _kernel_file(tmp_path, name, body):
    mod = f"memattack_{name}"
    (tmp_path / f"{mod}.py").write_text("from eagle import In, Out, Param\nimport eagle\n\n\n@eagle.kernel\n"
                                        "def carrier(i, x: In, j: Param, y: Out):\n" + body)
    return mod


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_an_alias_or_view_of_a_plane_is_refused_at_deploy(tmp_path, monkeypatch, name):
    body, match = ATTACKS[name]
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = __import__(_kernel_file(tmp_path, name, body))
    with pytest.raises(ValueError, match=rf"kernel 'carrier', line \d+: {match}"):
        eagle.deploy(mod.carrier)


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_an_artifact_whose_kernel_aliases_a_plane_is_refused_at_load(tmp_path, name):
    """The attack as a file someone else wrote: the saved kernel.py replaced, hashes recomputed."""
    body, match = ATTACKS[name]
    path = tmp_path / "art"
    eagle.save(carrier, path)
    src = (path / "kernel.py").read_text()
    head = src[:src.index("def carrier")]
    (path / "kernel.py").write_text(head + "def carrier(i, x: In, j: Param, y: Out):\n" + body)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["source_hash"] = hashlib.sha256((path / "kernel.py").read_bytes()).hexdigest()
    manifest["integrity"] = field_hashes(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))
    x = np.arange(8.0)
    before = x.copy()
    with pytest.raises(ValueError, match=rf"kernel 'carrier', line \d+: {match}"):
        eagle.plan.plan(eagle.load(path), structure=eagle.exec.HostTeam).run(x=x, j=3)
    assert np.array_equal(x, before)


def _cases(where, **env):
    full = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "EAGLE_HOST_SIMD",
                                                           "EAGLE_HOST_LANES")}
    full.update(env, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-m", "tests.memory_cases", where], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env=full)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])     # never a signal
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _reference(x, k, steps):
    a = [0.0, 0.0, 0.0]
    out = []
    for v in x:
        a = [0.0, 0.0, 0.0]
        for _ in range(steps):
            a[k] = a[k] + float(v)
        out.append(a[0] + a[1] + a[2])
    return np.array(out)


@pytest.mark.parametrize("path,env", [("simd", {"EAGLE_HOST_SIMD": "1"}),
                                      ("lanes", {"EAGLE_HOST_SIMD": "0", "EAGLE_HOST_LANES": "4"}),
                                      ("one", {"EAGLE_HOST_SIMD": "0", "EAGLE_HOST_LANES": "1"}),
                                      ("device", {"NUMBA_ENABLE_CUDASIM": "1"})])
def test_every_index_of_an_array_the_body_makes_is_checked(path, env):
    records = _cases("device" if path == "device" else "host", **env)
    assert [(r["via"], r["k"]) for r in records] == [(via, k) for via in ("deployed", "loaded")
                                                     for k in (1, 3, -1, 10 ** 9)]
    x = np.linspace(1.0, 2.0, 40)
    for r in records:
        if path != "device":
            assert r["path"] == path
        assert r["untouched"]
        if r["k"] == 1:
            assert np.array_equal(np.array(r["y"]), _reference(x, 1, 3))
            continue
        where = r"sample 39 on the device" if path == "device" else r"sample 0"
        assert r.get("error", "").startswith(f"index {r['k']} is out of range for array 'a' (made in the kernel's "
                                             "body), whose axis 0 has 3 entries"), r
        assert f"[kernel 'local_write', {where}]" in r["error"], r


def _peek(a, k):                  # compiled from source with the kernel: reads its plane
    return a[k]


def _poke(a, k):                  # writes the plane it is given
    a[k] = 1.0
    return 0.0


def _poke_alias(a, k):            # writes it through another name
    b = a
    b[k] = 1.0
    return 0.0


def _poke_deeper(a, k):           # passes it on to a helper that writes it
    return _poke(a, k)


@eagle.kernel
def reads_through_helper(i, x: In, j: Param, y: Out):
    y[i] = _peek(x, j)


@eagle.kernel
def writes_in_through_helper(i, x: In, j: Param, y: Out):
    y[i] = _poke(x, j)


@eagle.kernel
def writes_in_through_alias_in_helper(i, x: In, j: Param, y: Out):
    y[i] = _poke_alias(x, j)


@eagle.kernel
def writes_in_two_helpers_down(i, x: In, j: Param, y: Out):
    y[i] = _poke_deeper(x, j)


@eagle.kernel
def writes_in_through_ufunc_out(i, x: In, y: Out):
    np.add(y, 1.0, x)


@pytest.mark.parametrize("kernel,helper,what", [
    (writes_in_through_helper, "_poke", r"a\[k\]"), (writes_in_through_alias_in_helper, "_poke_alias", "b = a"),
    (writes_in_two_helpers_down, "_poke", r"a\[k\]")])
def test_an_in_plane_written_by_a_helper_is_refused_at_deploy(kernel, helper, what):
    with pytest.raises(ValueError, match=rf"kernel '{kernel.name}', line \d+: passes In plane 'x' to helper "
                                         rf"'{helper}', which does more than read it \({what}"):
        eagle.deploy(kernel)


def test_a_plane_passed_to_a_function_eagle_does_not_compile_is_refused():
    with pytest.raises(ValueError, match=r"kernel 'writes_in_through_ufunc_out', line \d+: passes plane 'y' to "
                                         r"np.add, which eagle does not compile with bounds checks"):
        eagle.deploy(writes_in_through_ufunc_out)


def test_an_artifact_whose_helper_writes_an_in_plane_is_refused_at_load(tmp_path):
    path = tmp_path / "art"
    eagle.save(reads_through_helper, path)
    manifest = json.loads((path / "manifest.json").read_text())
    helper = next(g for g in manifest["frozen"] if g["kind"] == "function")
    helper["source"] = "def _peek(a, k):\n    a[k] = 1.0\n    return 0.0"
    manifest["integrity"] = field_hashes(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))
    x = np.arange(8.0)
    before = x.copy()
    with pytest.raises(ValueError, match=r"kernel 'reads_through_helper', line \d+: passes In plane 'x' to "
                                         r"helper '_peek', which does more than read it \(a\[k\]"):
        eagle.plan.plan(eagle.load(path), structure=eagle.exec.HostTeam).run(x=x, j=3)
    assert np.array_equal(x, before)


def test_a_helper_reading_a_plane_stays_checked_on_the_host_and_is_refused_on_the_device():
    from eagle.device_codegen import device_source
    x = np.arange(8.0)
    got = eagle.plan.plan(reads_through_helper, structure=eagle.exec.HostTeam).run(x=x, j=5)
    assert np.array_equal(got, np.full(8, 5.0))
    with pytest.raises(IndexError, match=r"index is out of bounds.*\[kernel 'reads_through_helper'"):
        eagle.plan.plan(reads_through_helper, structure=eagle.exec.HostTeam).run(x=x, j=10 ** 9)
    with pytest.raises(ValueError, match=r"kernel 'reads_through_helper': helper '_peek' indexes an array "
                                         r"\(a\[k\]\), which the device cannot check there"):
        device_source(eagle.deploy(reads_through_helper))


@eagle.kernel
def mixed_tuple(i, x: In, y: Out):
    t = (1, 2.5)
    a = np.zeros(2)
    y[i] = t[1] + a[1] + x[i] + t[0]


@eagle.kernel
def constant_past_the_end(i, x: In, y: Out):
    a = np.zeros(2)
    y[i] = a[2] + x[i]


def test_a_tuple_of_mixed_types_still_reads_by_a_literal_index_and_a_literal_past_an_array_is_checked():
    x = np.linspace(-1.0, 1.0, 33)
    got = eagle.plan.plan(mixed_tuple, structure=eagle.exec.HostTeam).run(x=x)
    assert np.array_equal(got, np.array([2.5 + 0.0 + v + 1 for v in x]))
    with pytest.raises(IndexError, match=r"index 2 is out of range for array 'a' \(made in the kernel's body\), "
                                         r"whose axis 0 has 2 entries .*\[kernel 'constant_past_the_end', sample 0\]"):
        eagle.plan.plan(constant_past_the_end, structure=eagle.exec.HostTeam).run(x=x)
