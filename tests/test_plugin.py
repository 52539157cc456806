"""Plugins: what ``eagle.deploy`` records, frozen constants, pickling (a kernel from
``__main__`` included), artifacts, and the disk cache across processes."""
from __future__ import annotations

import importlib
import json
import pickle
import sys

import cloudpickle
import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import Cell, In, Mutable, Out, Param
from eagle import plan as eplan
from eagle.roles import Role
from tests.kernels import CASES, as_dict, inputs, same_bits

#: name -> (exec_access, exec_op, cells, reads_other_samples)
EXPECTED = {
    "axpb": ("sample_local", None, {}, False),
    "transcendental": ("sample_local", None, {}, False),
    "stencil": ("cross_sample_read", None, {}, True),
    "histogram": ("cross_sample_write", None, {}, False),
    "reductions": ("mapreduce", None, {"total": "sum", "prod": "times", "hi": "max", "lo": "min",
                                       "positive": "land"}, False),
    "oscillator": ("sample_local", "sum", {"energy": "sum"}, False),
    "halvings": ("sample_local", None, {}, False),
    "vectors": ("sample_local", None, {}, False),
    "integers": ("sample_local", None, {}, False),
    "neighbour_sum": ("mapreduce", "sum", {"total": "sum"}, True),
}


def host_run(plugin, name, n=57):
    return as_dict(plugin, eplan.plan(plugin, structure=eexec.HostTeam).run(**inputs(name, n)))


# --- what a plugin records ---------------------------------------------------------------------

def test_every_case_has_an_expected_row():
    assert set(EXPECTED) == set(CASES)


@pytest.mark.parametrize("name", list(CASES))
def test_plugin_attributes(name):
    kernel = CASES[name][0]
    plugin = eagle.deploy(kernel)
    access, op, cells, reads_other = EXPECTED[name]
    assert plugin.name == name == kernel.name
    assert plugin.exec_access == access
    assert plugin.exec_op == op
    assert plugin.cells == cells
    assert plugin.reads_other_samples is reads_other
    assert plugin.scalar_type == "float64"
    assert plugin.arg_spec == kernel.arg_spec
    assert all(isinstance(role, Role) and isinstance(arg, str) for role, arg in plugin.arg_spec)
    assert eagle.deploy(plugin) is plugin
    assert eagle.deploy(kernel) == plugin


def test_arg_specs_hold_the_declared_roles():
    assert eagle.deploy(CASES["axpb"][0]).arg_spec == ((In, "x"), (Param, "a"), (Param, "b"), (Out, "y"))
    assert eagle.deploy(CASES["oscillator"][0]).arg_spec == (
        (In, "omega"), (Param, "dt"), (Param, "steps"), (Mutable, "x"), (Mutable, "v"), (Cell["sum"], "energy"))
    spec = dict((arg, role) for role, arg in eagle.deploy(CASES["vectors"][0]).arg_spec)
    assert spec["q"] == Out[3] and spec["q"].width == 3 and spec["q"].out_dtype == np.float64
    assert spec["norm"] == Out and spec["norm"].width is None
    spec = dict((arg, role) for role, arg in eagle.deploy(CASES["integers"][0]).arg_spec)
    assert spec["parity"] == Out["int64"] and spec["parity"].out_dtype == np.int64
    assert spec["y"].out_dtype == np.float64


def test_sliceable_planes_are_those_touched_only_at_i():
    assert eagle.deploy(CASES["axpb"][0]).sliceable == {"x", "y"}
    assert eagle.deploy(CASES["vectors"][0]).sliceable == {"p", "q", "norm"}
    assert eagle.deploy(CASES["stencil"][0]).sliceable == {"y"}          # x.shape and neighbours
    assert "counts" not in eagle.deploy(CASES["histogram"][0]).sliceable


def test_access_may_widen():
    axpb = CASES["axpb"][0]
    x = np.linspace(-2, 2, 101)
    want = eplan.plan(eagle.deploy(axpb), structure=eexec.HostTeam).run(x=x, a=3.0, b=0.5)
    for access in ("sample_local", "cross_sample_read", "cross_sample_write"):
        plugin = eagle.deploy(eagle.kernel(axpb.fn, access=access))
        assert plugin.exec_access == access
        assert plugin.reads_other_samples is (access != "sample_local")
        assert plugin.sliceable == ({"x", "y"} if access == "sample_local" else set())
        got = eplan.plan(plugin, structure=eexec.HostTeam).run(x=x, a=3.0, b=0.5)
        assert same_bits(got, want)
    widened = eagle.deploy(eagle.kernel(axpb.fn, access="cross_sample_write"))
    assert widened != eagle.deploy(axpb)
    with pytest.raises(ValueError, match="one partition only"):
        eplan.plan(widened, structure=eexec.HostTeam, npartitions=2)
    with pytest.raises(ValueError, match=r"kernel 'histogram': access='cross_sample_read' is narrower"):
        eagle.deploy(eagle.kernel(CASES["histogram"][0].fn, access="cross_sample_read"))


# --- module-level constants are frozen at deploy -----------------------------------------------

CONSTANTS_MODULE = """
import numpy as np
import eagle
from eagle import In, Out

K = {k!r}
N = 3
H = np.float32(0.5)

@eagle.kernel
def scaled_by_k(i, x: In, y: Out):
    y[i] = x[i] * K + N + H
"""


def write_constants_module(path, name, k):
    path.mkdir(exist_ok=True)
    (path / f"{name}.py").write_text(CONSTANTS_MODULE.format(k=k))


def test_module_constants_are_frozen_at_deploy(tmp_path, monkeypatch):
    write_constants_module(tmp_path, "frozen_k_module", 2.0)
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("frozen_k_module")
    x = np.linspace(-1.0, 1.0, 41)
    old = eagle.deploy(mod.scaled_by_k)
    old_plan = eplan.plan(old, structure=eexec.HostTeam)
    assert same_bits(old_plan.run(x=x), x * 2.0 + 3 + 0.5)
    frozen = {g["name"]: g for g in old.frozen}
    assert frozen["K"]["type"] == "float" and float.fromhex(frozen["K"]["value"]) == 2.0
    assert frozen["N"]["type"] == "int" and frozen["H"]["type"] == "float32"

    monkeypatch.setattr(mod, "K", 3.0)
    assert same_bits(old_plan.run(x=x), x * 2.0 + 3 + 0.5)      # the old plugin keeps its value
    new = eagle.deploy(mod.scaled_by_k)
    assert new.key != old.key and new != old
    assert eagle.host.host_entry(new).module is not eagle.host.host_entry(old).module
    assert eagle.host.host_entry(new).module.__name__ != eagle.host.host_entry(old).module.__name__
    assert same_bits(eplan.plan(new, structure=eexec.HostTeam).run(x=x), x * 3.0 + 3 + 0.5)
    assert same_bits(old_plan.run(x=x), x * 2.0 + 3 + 0.5)
    # pickled, each keeps its own value
    assert same_bits(eplan.plan(pickle.loads(pickle.dumps(old)), structure=eexec.HostTeam).run(x=x),
                     x * 2.0 + 3 + 0.5)
    monkeypatch.delitem(sys.modules, "frozen_k_module")


RUN_CONSTANTS = """
import importlib, json, sys
import numpy as np
import eagle, eagle.exec as eexec
from eagle import plan as eplan

sys.path.insert(0, sys.argv[1])
mod = importlib.import_module("cached_k_module")
plugin = eagle.deploy(mod.scaled_by_k)
y = eplan.plan(plugin, structure=eexec.HostTeam).run(x=np.linspace(-1.0, 1.0, 41))
stats = eagle.host.host_entry(plugin).loop.stats
print(json.dumps({"y": [v.hex() for v in y.tolist()], "key": plugin.key,
                  "hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values()),
                  "cache_path": stats.cache_path}))
"""


def test_a_new_process_loads_the_kernel_from_the_disk_cache_and_never_a_stale_one(tmp_path, python):
    cache, src = tmp_path / "cache", tmp_path / "src"
    script = tmp_path / "run_constants.py"
    script.write_text(RUN_CONSTANTS)
    x = np.linspace(-1.0, 1.0, 41)

    def run():
        out = json.loads(python(script, src, cache=cache).strip().splitlines()[-1])
        return np.array([float.fromhex(v) for v in out["y"]]), out

    write_constants_module(src, "cached_k_module", 2.0)
    y, first = run()
    assert same_bits(y, x * 2.0 + 3 + 0.5)
    assert first["misses"] > 0 and first["hits"] == 0                 # compiled in the first process
    assert first["cache_path"].startswith(str(cache))
    assert list((cache / "__pycache__").glob("eagle_host_scaled_by_k_*._eagle_tile-*.nbi"))

    y, second = run()
    assert same_bits(y, x * 2.0 + 3 + 0.5)
    assert second["key"] == first["key"]
    assert second["hits"] > 0 and second["misses"] == 0               # loaded, not compiled again

    write_constants_module(src, "cached_k_module", 5.0)                 # the constant changes
    y, third = run()
    assert same_bits(y, x * 5.0 + 3 + 0.5)
    assert third["key"] != first["key"]
    assert third["misses"] > 0 and third["hits"] == 0                 # a new kernel, not the stale one


# --- pickling ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
@pytest.mark.parametrize("name", list(CASES))
def test_plugins_and_kernels_pickle(name, dumps):
    kernel = CASES[name][0]
    plugin = eagle.deploy(kernel)
    again = pickle.loads(dumps(plugin))
    assert again == plugin and again.key == plugin.key
    for attr in ("name", "arg_spec", "exec_access", "exec_op", "cells", "scalar_type", "reads_other_samples",
                 "frozen", "defaults", "sliceable"):
        assert getattr(again, attr) == getattr(plugin, attr), attr
    k2 = pickle.loads(dumps(kernel))
    assert isinstance(k2, eagle.Kernel) and k2.name == kernel.name and k2.arg_spec == kernel.arg_spec
    assert eagle.deploy(k2) == plugin


@pytest.mark.parametrize("name", ["transcendental", "reductions", "vectors"])
def test_unpickled_plugins_run_the_same_bits(name):
    plugin = eagle.deploy(CASES[name][0])
    want = host_run(plugin, name)
    assert same_bits(host_run(pickle.loads(pickle.dumps(plugin)), name), want)
    assert same_bits(host_run(eagle.deploy(cloudpickle.loads(cloudpickle.dumps(CASES[name][0]))), name), want)


MAKE_IN_MAIN = """{future}
import math, pickle, sys
import cloudpickle
import eagle
from eagle import In, Out, Param

GAIN = 1.75


@eagle.kernel
def main_kernel(i, x: In, a: Param, y: Out):
    y[i] = math.sqrt(x[i]) * GAIN + a


if __name__ == "__main__":
    out = sys.argv[1]
    plugin = eagle.deploy(main_kernel)
    for what, obj in (("kernel", main_kernel), ("plugin", plugin)):
        with open(f"{out}/{what}.pickle", "wb") as f:
            pickle.dump(obj, f)
        with open(f"{out}/{what}.cloudpickle", "wb") as f:
            cloudpickle.dump(obj, f)
    print(plugin.key)
"""

USE_ELSEWHERE = """
import pickle, sys
import numpy as np
import eagle, eagle.exec as eexec
from eagle import plan as eplan

out = sys.argv[1]
x = np.linspace(0.0, 4.0, 101)
results, keys = {}, set()
for name in ("kernel.pickle", "kernel.cloudpickle", "plugin.pickle", "plugin.cloudpickle"):
    with open(f"{out}/{name}", "rb") as f:
        plugin = eagle.deploy(pickle.load(f))
    keys.add(plugin.key)
    results[name.replace(".", "_")] = eplan.plan(plugin, structure=eexec.HostTeam).run(x=x, a=0.5)
np.savez(f"{out}/results.npz", **results)
print(" ".join(sorted(keys)))
"""


@pytest.mark.parametrize("future", ["", "from __future__ import annotations"], ids=["annotations", "postponed"])
def test_a_kernel_defined_in_main_travels_to_another_process(future, tmp_path, python):
    made, used = tmp_path / "maker", tmp_path / "user"
    made.mkdir()
    used.mkdir()
    (made / "make_in_main.py").write_text(MAKE_IN_MAIN.replace("{future}", future))
    (used / "use_elsewhere.py").write_text(USE_ELSEWHERE)
    key = python(made / "make_in_main.py", tmp_path, cwd=made).split()[-1]
    keys = python(used / "use_elsewhere.py", tmp_path, cwd=used).split()
    assert keys == [key]
    x = np.linspace(0.0, 4.0, 101)
    with np.load(tmp_path / "results.npz") as results:
        assert len(results.files) == 4
        for name in results.files:
            assert same_bits(results[name], np.sqrt(x) * 1.75 + 0.5), name


# --- artifacts ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["transcendental", "reductions", "integers"])
def test_save_and_load(name, tmp_path):
    plugin = eagle.deploy(CASES[name][0])
    path = plugin.save(tmp_path / name)
    manifest = json.loads((tmp_path / name / "manifest.json").read_text())
    for field in ("name", "schema", "arg_spec", "access", "op", "source_hash", "frozen"):
        assert field in manifest, field
    assert (tmp_path / name / "kernel.py").read_text() == plugin.source
    loaded = eagle.load(path)
    assert loaded == plugin and loaded.exec_access == plugin.exec_access and loaded.cells == plugin.cells
    assert same_bits(host_run(loaded, name), host_run(plugin, name))


def test_load_refuses_another_schema_version(tmp_path):
    path = eagle.deploy(CASES["axpb"][0]).save(tmp_path / "axpb")
    manifest_file = tmp_path / "axpb" / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["schema"] = manifest["schema"] + 1
    manifest_file.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=rf"manifest schema version {manifest['schema']}, this eagle reads "
                                         rf"schema version {manifest['schema'] - 1}"):
        eagle.load(path)


def test_load_refuses_a_source_that_does_not_match_its_hash(tmp_path):
    path = eagle.deploy(CASES["axpb"][0]).save(tmp_path / "axpb")
    source = tmp_path / "axpb" / "kernel.py"
    source.write_text(source.read_text().replace("a * x[i] + b", "a * x[i] - b"))
    with pytest.raises(ValueError, match=r"source of kernel 'axpb' does not match the source_hash"):
        eagle.load(path)


def test_load_refuses_what_is_not_an_artifact(tmp_path):
    with pytest.raises(FileNotFoundError, match="not an eagle plugin artifact"):
        eagle.load(tmp_path / "nothing")


def test_the_artifact_holds_what_the_source_alone_cannot_run(tmp_path):
    plugin = eagle.deploy(CASES["transcendental"][0])
    plugin.save(tmp_path / "t")
    manifest = json.loads((tmp_path / "t" / "manifest.json").read_text())
    frozen = {g["name"]: g for g in manifest["frozen"]}
    assert frozen["math"] == {"name": "math", "kind": "module", "module": "math"}
    assert float.fromhex(frozen["SCALE"]["value"]) == 1.5
    assert plugin.source.startswith("def transcendental(")      # the source alone, decorator removed
