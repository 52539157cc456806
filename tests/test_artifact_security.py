"""Loading an artifact runs only what a kernel may contain: each attack of someone who can write
the artifact (and recompute its unkeyed hashes) is refused at load, naming the field, and the
marker file its code would write never appears; a signed artifact refuses any change to a file.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import pickle

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import In, Out, Param
from eagle import plan as eplan
from eagle.plugin import field_hashes

KEY = b"a secret only the user holds"


def twice(v):                    # a plain function: compiled from its source with the kernel
    return 2.0 * v


@eagle.kernel
def guarded(i, x: In, a: Param, y: Out):
    y[i] = twice(x[i]) + a * math.sqrt(x[i] * x[i] + 1.0)


def _want(x, a):
    return 2.0 * x + a * np.sqrt(x * x + 1.0)


X = np.linspace(-2.0, 3.0, 64)


@pytest.fixture
def artifact(tmp_path, monkeypatch):
    """A saved artifact, the working directory an empty one of the test's, and the marker path."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))           # as `python script.py` run from that directory
    path = tmp_path / "art"
    eagle.save(guarded, path)
    return path, tmp_path / "MARKER"


def _manifest(path):
    return json.loads((path / "manifest.json").read_text())


def _rewrite(path, manifest):
    """Write an edited manifest with its hashes recomputed, as anyone who reads the format can."""
    manifest["source_hash"] = hashlib.sha256((path / "kernel.py").read_bytes()).hexdigest()
    manifest["integrity"] = field_hashes(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


def _helper(manifest):
    return next(g for g in manifest["frozen"] if g["kind"] == "function")


def _run(plugin):
    return eplan.plan(plugin, structure=eexec.HostTeam).run(x=X, a=0.5)


def _refused(path, match, marker, **load):
    with pytest.raises(ValueError, match=match):
        _run(eagle.load(path, **load))               # refused at load: the run never starts
    assert not marker.exists()


def test_the_untouched_artifact_loads_and_runs(artifact):
    path, marker = artifact
    assert np.array_equal(_run(eagle.load(path)), _want(X, 0.5))
    assert np.array_equal(_run(eagle.load(path, trust=True)), _want(X, 0.5))


def test_a_helper_with_module_level_code_is_refused(artifact):
    path, marker = artifact
    m = _manifest(path)
    _helper(m)["source"] += f"\n__import__('os').system('touch {marker}')"
    _rewrite(path, m)
    _refused(path, r"frozen helper 'twice' must be exactly one function definition and nothing else \(line 3", marker)


def test_a_helper_whose_default_runs_code_is_refused(artifact):
    path, marker = artifact
    m = _manifest(path)
    _helper(m)["source"] = f"def twice(v, k=__import__('os').system('touch {marker}')):\n    return 2.0 * v"
    _rewrite(path, m)
    _refused(path, r"frozen helper 'twice': a default value must be a literal number", marker)


@pytest.mark.parametrize("source, rule", [
    ("@__import__('os').system\ndef twice(v):\n    return 2.0 * v", "has a decorator"),
    ("def twice(v: __import__('os').system('touch {marker}')):\n    return 2.0 * v", "has annotations"),
    ("def twice(v):\n    with numba.objmode():\n        __import__('os').system('touch {marker}')\n    return v",
     "uses with"),
    ("def other(v):\n    return 2.0 * v", "its source defines 'other'"),
])
def test_a_helper_that_is_not_one_plain_function_is_refused(artifact, source, rule):
    path, marker = artifact
    m = _manifest(path)
    _helper(m)["source"] = source.format(marker=marker)
    _rewrite(path, m)
    _refused(path, rf"frozen helper 'twice'.*{rule}", marker)


def test_a_kernel_source_with_module_level_code_is_refused(artifact):
    path, marker = artifact
    with open(path / "kernel.py", "a") as f:
        f.write(f"__import__('os').system('touch {marker}')\n")
    _rewrite(path, _manifest(path))
    _refused(path, r"the source of kernel 'guarded' must be exactly one function definition", marker)


def test_a_frozen_module_renamed_to_a_local_file_needs_trust(artifact):
    path, marker = artifact
    (path.parent / "work" / "mathx.py").write_text(f"import os\nos.system('touch {marker}')\nfrom math import *\n")
    m = _manifest(path)
    entry = next(g for g in m["frozen"] if g["kind"] == "module")
    entry["module"] = "mathx"
    _rewrite(path, m)
    _refused(path, r"manifest field 'frozen' imports module 'mathx'.*eagle.load\(path, trust=True\)", marker)
    # the user's word imports it (and runs its code: that is what trust means)
    assert np.array_equal(_run(eagle.load(path, trust=True)), _want(X, 0.5))
    assert marker.exists()


@pytest.mark.parametrize("edit, refusal", [
    (lambda m: m["arg_spec"][0].update(name="x); __import__('os').system('touch {marker}'); (x"),
     r"manifest field 'arg_spec': argument name .* is not a Python name"),
    (lambda m: m.update(index="i, x=__import__('os').system('touch {marker}')"),
     r"manifest field 'index': index name .* is not a Python name"),
    (lambda m: m.update(name="../../{marker}"), r"manifest field 'name': kernel name '\.\./\.\./.*' is not a Python name"),
    (lambda m: _helper(m).update(name="../../twice"), r"frozen global: name '\.\./\.\./twice' is not a Python name"),
    (lambda m: m.update(defaults={"a": "__import__('os')"}), r"manifest field 'defaults': the default of 'a' is not"),
])
def test_a_name_that_is_not_a_python_name_is_refused(artifact, edit, refusal):
    path, marker = artifact
    m = _manifest(path)
    edit(m)
    _rewrite(path, json.loads(json.dumps(m).replace("{marker}", str(marker))))
    _refused(path, refusal, marker)


def test_a_file_linked_outside_the_artifact_is_refused(artifact, tmp_path):
    path, marker = artifact
    outside = tmp_path / "elsewhere.py"
    outside.write_bytes((path / "kernel.py").read_bytes())
    os.unlink(path / "kernel.py")
    os.symlink(outside, path / "kernel.py")
    _refused(path, r"kernel.py points outside the artifact", marker)


def test_a_signed_artifact_refuses_an_edit_with_recomputed_hashes(artifact):
    path, marker = artifact
    eagle.save(guarded, path, key=KEY)
    assert np.array_equal(_run(eagle.load(path, key=KEY)), _want(X, 0.5))
    source = (path / "kernel.py").read_text()
    (path / "kernel.py").write_text(source.replace("twice(x[i])", "twice(x[i]) + 1.0"))
    _rewrite(path, _manifest(path))
    # the unkeyed hashes cannot tell: without the key the edited body loads and runs
    assert np.array_equal(_run(eagle.load(path)), 2.0 * X + 1.0 + 0.5 * np.sqrt(X * X + 1.0))
    _refused(path, r"kernel.py does not match its signature", marker, key=KEY)


def test_a_signed_artifact_names_the_file_that_changed(artifact):
    path, marker = artifact
    eagle.save(guarded, path, key=KEY)
    m = _manifest(path)
    _helper(m)["source"] = "def twice(v):\n    return 3.0 * v"
    _rewrite(path, m)
    _refused(path, r"manifest.json does not match its signature", marker, key=KEY)
    _refused(path, r"(kernel.py|manifest.json) does not match its signature", marker, key=b"another key")


def test_an_unsigned_artifact_is_refused_when_a_key_is_given(artifact):
    path, marker = artifact
    _refused(path, r"is not signed \(signature.json is missing\)", marker, key=KEY)
    eagle.save(guarded, path, key=KEY)
    assert np.array_equal(_run(eagle.load(path, key="a secret only the user holds")), _want(X, 0.5))
    with pytest.raises(ValueError, match="kernel.py does not match its signature"):
        eagle.load(path, key=b"another key")
    eagle.save(guarded, path)                        # saved again unsigned: the old signature goes
    assert not (path / "signature.json").exists()


def test_a_signature_that_leaves_a_file_out_is_refused(artifact):
    path, marker = artifact
    eagle.save(guarded, path, key=KEY)
    sig = json.loads((path / "signature.json").read_text())
    del sig["files"]["kernel.py"]
    (path / "signature.json").write_text(json.dumps(sig))
    _refused(path, r"kernel.py is not signed", marker, key=KEY)


def test_a_loaded_plugin_still_pickles_and_runs(artifact):
    path, _ = artifact
    plugin = pickle.loads(pickle.dumps(eagle.load(path)))
    assert plugin == eagle.deploy(guarded)
    assert np.array_equal(_run(plugin), _want(X, 0.5))


def test_a_file_given_for_the_directory_says_so(artifact):
    path, _ = artifact
    with pytest.raises(NotADirectoryError, match=rf"eagle.load\('{path}/manifest.json'\): that is a file; .*"
                                                 rf"pass the directory \(here '{path}'\)"):
        eagle.load(path / "manifest.json")


def test_a_manifest_that_is_a_json_list_says_so(artifact):
    path, _ = artifact
    (path / "manifest.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=rf"plugin artifact '{path}': manifest.json holds a JSON list, not the "
                                         r"object eagle writes.*eagle.save"):
        eagle.load(path)


def test_deploy_refuses_a_helper_default_that_is_not_a_number():
    scale = 2.0

    def scaled(v, k=scale * 1.0):
        return k * v

    @eagle.kernel
    def calls_scaled(i, x: In, y: Out):
        y[i] = scaled(x[i])
    with pytest.raises(ValueError, match=r"kernel 'calls_scaled': helper 'scaled': a default value must be a literal"):
        eagle.deploy(calls_scaled)


# -- the files themselves: regular files of the artifact, no link, no FIFO, a size cap -----------
@pytest.mark.parametrize("key", [None, KEY], ids=["unsigned", "signed"])
def test_a_fifo_for_kernel_py_is_refused_at_once(artifact, key):
    import time
    path, marker = artifact
    eagle.save(guarded, path, key=key)
    os.unlink(path / "kernel.py")
    os.mkfifo(path / "kernel.py")                      # a reader of it would wait for a writer forever
    t = time.monotonic()
    _refused(path, r"kernel.py is not a regular file \(a FIFO", marker, **({} if key is None else {"key": key}))
    assert time.monotonic() - t < 5


def test_a_link_into_a_sibling_directory_is_outside_the_artifact(artifact):
    path, marker = artifact
    sibling = path.parent / (path.name + "-x")          # shares the artifact's name as a string prefix
    sibling.mkdir()
    (sibling / "kernel.py").write_bytes((path / "kernel.py").read_bytes())
    os.unlink(path / "kernel.py")
    os.symlink(sibling / "kernel.py", path / "kernel.py")
    _refused(path, r"kernel.py points outside the artifact \(to '.*art-x/kernel.py'\)", marker)


def test_a_link_inside_the_artifact_is_not_followed(artifact):
    path, marker = artifact
    os.rename(path / "kernel.py", path / "real.py")
    os.symlink("real.py", path / "kernel.py")
    _refused(path, r"kernel.py is a symbolic link; an artifact's files are read without following links", marker)


def test_a_file_over_the_size_cap_is_refused_and_the_docs_state_the_cap(artifact):
    from eagle.artifact import MAX_FILE_BYTES
    path, marker = artifact
    with open(path / "kernel.py", "r+b") as f:
        f.truncate(MAX_FILE_BYTES + 1)                  # sparse: cheap to make
    _refused(path, rf"kernel.py is larger than {MAX_FILE_BYTES // 2**20} MiB", marker)
    docs = open(os.path.join(os.path.dirname(__file__), "..", "docs", "artifacts.md")).read()
    assert f"{MAX_FILE_BYTES // 2**20} MiB" in docs


def test_two_signed_files_swapped_are_refused(artifact):
    """Swap kernel.py and manifest.json and their signature entries: each MAC still matches its
    bytes, but not its name, so the swap is refused before either file is parsed."""
    path, marker = artifact
    eagle.save(guarded, path, key=KEY)
    k, m = (path / "kernel.py").read_bytes(), (path / "manifest.json").read_bytes()
    (path / "kernel.py").write_bytes(m)
    (path / "manifest.json").write_bytes(k)
    sig = json.loads((path / "signature.json").read_text())
    sig["files"]["kernel.py"], sig["files"]["manifest.json"] = sig["files"]["manifest.json"], sig["files"]["kernel.py"]
    (path / "signature.json").write_text(json.dumps(sig))
    _refused(path, r"(kernel.py|manifest.json) does not match its signature", marker, key=KEY)
