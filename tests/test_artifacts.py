"""Artifacts and pickles are checked before they run: an edited manifest is refused, naming the
field, and nothing in a manifest is ever executed as code."""
from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import In, Out, Param
from eagle import plan as eplan
from eagle.plugin import field_hashes

OFFSET = 3          # frozen into the kernel at deploy


@eagle.kernel
def shifted(i, x: In, a: Param, y: Out, z: Out):
    y[i] = a * x[i] + OFFSET
    z[i] = x[i] - a


def _saved(tmp_path):
    path = tmp_path / "art"
    eagle.deploy(shifted).save(path)
    with open(path / "manifest.json") as f:
        return path, json.load(f)


def _write(path, manifest, rehash=False):
    if rehash:                                      # what someone who knows the format could do
        manifest["integrity"] = field_hashes(manifest)
    with open(path / "manifest.json", "w") as f:
        json.dump(manifest, f)


def test_a_saved_artifact_loads_and_runs_the_same(tmp_path):
    path, _ = _saved(tmp_path)
    x = np.linspace(-1.0, 1.0, 9)
    out = eplan.plan(eagle.load(path), structure=eexec.HostTeam).run(x=x, a=2.0)
    assert np.array_equal(out["y"], 2.0 * x + 3) and np.array_equal(out["z"], x - 2.0)


@pytest.mark.parametrize("field, edit", [
    ("arg_spec", lambda m: m["arg_spec"].reverse()),
    ("arg_spec", lambda m: m["arg_spec"][2].update(width=4)),
    ("frozen", lambda m: m["frozen"][0].update(value="4")),
    ("fma", lambda m: m.update(fma=True)),
    ("first_line", lambda m: m.update(first_line=1)),
    ("defaults", lambda m: m.update(defaults={"a": 1.0})),
])
def test_an_edited_manifest_field_is_refused_by_name(tmp_path, field, edit):
    path, manifest = _saved(tmp_path)
    edit(manifest)
    _write(path, manifest)
    with pytest.raises(ValueError, match=rf"plugin artifact .*manifest field '{field}' does not match"):
        eagle.load(path)


def test_a_removed_or_added_field_is_refused(tmp_path):
    path, manifest = _saved(tmp_path)
    del manifest["cells"]
    _write(path, manifest)
    with pytest.raises(ValueError, match="manifest field 'cells' is missing"):
        eagle.load(path)
    path, manifest = _saved(tmp_path)
    manifest["extra"] = 1
    _write(path, manifest)
    with pytest.raises(ValueError, match="manifest field 'extra' was added"):
        eagle.load(path)


@pytest.mark.parametrize("entry", [
    {"name": "OFFSET", "kind": "const", "type": "int", "value": "__import__('os').system('touch PWNED')"},
    {"name": "OFFSET", "kind": "const", "type": "float64", "value": "__import__('os')"},
    {"name": "OFFSET", "kind": "const", "type": "int8)\nimport os\n_x = (1", "value": "1"},
    {"name": "OFFSET = 1\nimport os\nz", "kind": "const", "type": "int", "value": "1"},
    {"name": "OFFSET", "kind": "module", "module": "os; import sys"},
])
def test_manifest_values_are_data_never_code(tmp_path, monkeypatch, entry):
    """Even with hashes recomputed, a constant is parsed as a number and a name as a name."""
    monkeypatch.chdir(tmp_path)
    path, manifest = _saved(tmp_path)
    manifest["frozen"][0] = entry
    _write(path, manifest, rehash=True)
    with pytest.raises(ValueError, match="frozen"):
        eplan.plan(eagle.load(path), structure=eexec.HostTeam).run(x=np.ones(3), a=1.0)
    assert not os.path.exists(tmp_path / "PWNED")


def test_an_unpickled_plugin_checks_its_hashes():
    plugin = eagle.deploy(shifted)
    cls, (manifest, source) = plugin.__reduce__()
    assert pickle.loads(pickle.dumps(plugin)) == plugin
    tampered = json.loads(json.dumps(manifest))
    tampered["frozen"][0]["value"] = "5"
    with pytest.raises(ValueError, match="plugin 'shifted': manifest field 'frozen' does not match"):
        cls(tampered, source)
    with pytest.raises(ValueError, match="does not match the source_hash"):
        cls(manifest, source.replace("OFFSET", "OFFSET + 1"))


@pytest.mark.parametrize("sub, rule", [((3, 4), "one width at most"), (("float32", "int64"), "one dtype at most")])
def test_an_out_with_two_widths_or_two_dtypes_is_refused(sub, rule):
    with pytest.raises(TypeError, match=rule):
        Out[sub]
