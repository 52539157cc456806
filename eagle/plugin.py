"""``eagle.deploy``: a kernel made into a plugin -- analysed, frozen, hashed, portable.

A plugin holds everything needed to run the kernel anywhere: its source, the roles of its
arguments, its access class, and the module-level names its body uses (numbers frozen as
constants, modules and compiled functions as imports).  It pickles by value (it can travel to
Dask workers) and saves as an artifact: ``eagle.save(plugin, dir)`` / ``eagle.load(dir)``
(``eagle.artifact``: signatures, trusted modules).

Integrity: the manifest carries a SHA-256 of every other field (``integrity``), and the source
its own (``source_hash``).  Every plugin checks them when it is built -- at load, when it is
unpickled on a worker -- and refuses, naming the field, a manifest edited after deploy; the
roles and the frozen constants are then read back as data (``eagle.freeze.check_entry``), every
name must be a Python name, and the kernel's and helpers' sources must each be one plain function
(``eagle.freeze.check_function_source``).  The hashes are not keyed: they catch an edit, not an
attacker, who can recompute them -- a signature (``key=``) does that.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import tempfile

import numpy as np

from . import __version__
from .access import analyse
from .artifact import SIGNATURE, check_signature, read_inside, write_signature
from .codegen import globals_source
from .freeze import (NUMBER_TYPES, TRUSTED_MODULES, check_entry, check_function_source, check_name, freeze_globals,
                     modules_named, trusted)
from .device_ptx import device_ptx
from .host import host_entry
from .kernel import Kernel, kernel as _as_kernel
from .roles import OUTPUT_KINDS, Cell, In, Mutable, Out, Param, Table
from .syntax import parse

SCHEMA = 3          # 3: the Table role
INTEGRITY = "integrity"
MANIFEST = "manifest.json"
SOURCE = "kernel.py"

def _role_to_json(role, name):
    return {"name": name, "kind": role.kind, "width": role.width,
            "dtype": role.dtype.name if role.dtype is not None else None, "op": role.op}


def _role_from_json(d):
    """A role read back through the roles' own checks (``Out[w, dtype]``, ``Cell[op]``)."""
    base = {"In": In, "Out": Out, "Mutable": Mutable, "Param": Param, "Cell": Cell, "Table": Table}.get(d["kind"])
    if base is None:
        raise ValueError(f"argument {d['name']!r} has no role {d['kind']!r}")
    if d["kind"] == "Cell":
        return d["name"], base[d["op"]]
    sub = tuple(v for v in (d["width"], d["dtype"]) if v is not None)
    if d["kind"] == "Table":
        if d["width"] is not None:
            raise ValueError(f"argument {d['name']!r}: a Table takes no width")
        return d["name"], (base[d["dtype"]] if d["dtype"] is not None else base)
    if sub and d["kind"] != "Out":
        raise ValueError(f"argument {d['name']!r}: {d['kind']} takes no width or dtype")
    return d["name"], (base[sub] if sub else base)


def _sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def field_hashes(manifest: dict) -> dict:
    """SHA-256 of each manifest field but ``integrity`` itself, as canonical JSON."""
    return {k: _sha(json.dumps(v, sort_keys=True)) for k, v in manifest.items() if k != INTEGRITY}


def verify(manifest: dict, source: str):
    """Refuse, naming the field, a manifest or a source that does not match its hashes."""
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        got = manifest.get("schema") if isinstance(manifest, dict) else None
        raise ValueError(f"manifest schema version {got!r}, this eagle reads schema version {SCHEMA}")
    want = manifest.get(INTEGRITY)
    if not isinstance(want, dict):
        raise ValueError("the manifest has no integrity hashes")
    have = field_hashes(manifest)
    for field in sorted(set(want) | set(have)):
        if field not in have:
            raise ValueError(f"manifest field {field!r} is missing (edited after deploy?)")
        if want.get(field) != have[field]:
            what = "was added" if field not in want else "does not match its integrity hash"
            raise ValueError(f"manifest field {field!r} {what} (edited after deploy?)")
    if _sha(source) != manifest.get("source_hash"):
        raise ValueError(f"the source of kernel {manifest.get('name')!r} does not match the source_hash in its "
                         "manifest (edited after it was saved?)")
    _check_names(manifest)
    fdef = check_function_source(source, f"the source of kernel {manifest['name']!r}")
    params = [a.arg for a in fdef.args.posonlyargs + fdef.args.args]
    spec = [manifest["index"]] + [d["name"] for d in manifest["arg_spec"]]
    if params != spec or fdef.args.vararg or fdef.args.kwarg or fdef.args.kwonlyargs:
        raise ValueError(f"manifest field 'arg_spec': the kernel's parameters are {params}, the manifest "
                         f"names {spec}")
    for g in manifest["frozen"]:
        check_entry(g)


def _check_names(manifest: dict):
    """Every name the generated code or a cache file name uses: a Python name, by field."""
    check_name(manifest.get("name"), "manifest field 'name': kernel name")
    check_name(manifest.get("index"), "manifest field 'index': index name")
    if not isinstance(manifest.get("arg_spec"), list) or not all(isinstance(d, dict) for d in manifest["arg_spec"]):
        raise ValueError("manifest field 'arg_spec' is not a list of arguments")
    names = [check_name(d.get("name"), "manifest field 'arg_spec': argument name") for d in manifest["arg_spec"]]
    if len(set(names)) != len(names):
        raise ValueError(f"manifest field 'arg_spec': an argument name appears twice in {names}")
    for field in ("defaults", "cells"):
        value = manifest.get(field, {})
        if not isinstance(value, dict):
            raise ValueError(f"manifest field {field!r} is not a mapping of argument names")
        for name in value:
            if name not in names:
                raise ValueError(f"manifest field {field!r}: {name!r} is not an argument of the kernel")
    for name, v in manifest.get("defaults", {}).items():
        if not isinstance(v, (int, float)):
            raise ValueError(f"manifest field 'defaults': the default of {name!r} is not a number ({v!r})")
    if not isinstance(manifest.get("frozen"), list) or not all(isinstance(g, dict) for g in manifest["frozen"]):
        raise ValueError("manifest field 'frozen' is not a list of entries")


class Plugin:
    """A deployed kernel.  Build one with ``eagle.deploy(kernel)``."""

    scalar_type = "float64"

    def __init__(self, manifest: dict, source: str):
        try:
            verify(manifest, source)
        except (ValueError, TypeError, KeyError) as e:
            name = manifest.get("name") if isinstance(manifest, dict) else None
            raise ValueError(f"plugin {name!r}: {e}") from None
        self.manifest = manifest
        self.source = source
        self.name = manifest["name"]
        self.index_name = manifest["index"]
        self.arg_spec = tuple((role, name) for name, role in map(_role_from_json, manifest["arg_spec"]))
        self.roles = {name: role for role, name in self.arg_spec}
        self.defaults = dict(manifest.get("defaults", {}))
        self.frozen = manifest["frozen"]
        self.fma = manifest.get("fma", False)
        info = analyse(parse(source).body[0], self.index_name, self.roles, self.name, manifest.get("first_line", 1),
                       manifest.get("declared_access"), self.frozen)
        self.exec_access = info.access
        self.reads_other_samples = info.reads_other_samples
        self.plane_uses = info.planes
        self.range_params = info.range_params
        self.tables = info.tables
        self.cells = {name: role.op for role, name in self.arg_spec if role.kind == "Cell"}
        ops = set(self.cells.values())
        self.exec_op = ops.pop() if len(ops) == 1 else None
        self.key = _sha(json.dumps({"m": manifest, "s": source, "v": __version__}, sort_keys=True))[:24]

    # -- what the plan needs ---------------------------------------------------------------
    def names(self, *kinds):
        return [name for role, name in self.arg_spec if role.kind in kinds]

    @property
    def outputs(self):
        """Outputs in argument order: Out and Mutable planes, then cells where they stand."""
        return [name for role, name in self.arg_spec if role.kind in (*OUTPUT_KINDS, "Cell")]

    @property
    def sliceable(self):
        """Planes the body touches only as plane[i] / plane[i, k]: a task may hold only its slice."""
        return {n for n, u in self.plane_uses.items() if u.own_only}

    @property
    def host_lanes(self) -> int:
        """Samples the host engine's laned loop runs in lockstep (``host_path == "lanes"``); 1 on
        the vectorised path (see ``host_simd_width``) and one sample at a time (see
        ``host_lanes_reason``)."""
        return host_entry(self).lanes

    @property
    def host_simd_width(self) -> int | None:
        """Samples in one tile of the host's vectorised loop (``host_path == "simd"``); None when
        the host runs another loop (see ``host_simd_reason``)."""
        return host_entry(self).simd_width

    @property
    def host_lanes_reason(self):
        """Why the host engine runs one sample at a time, or None when it runs lanes."""
        return host_entry(self).lanes_reason

    @property
    def host_path(self) -> str:
        """The host loop that runs this kernel: ``"simd"`` (vectorised across samples, ``eagle.simd``),
        ``"lanes"`` (samples in lockstep, ``eagle.lanes``) or ``"one"`` (one sample at a time)."""
        return host_entry(self).path

    @property
    def host_simd_reason(self):
        """Why the host does not run the vectorised loop, or None when it does."""
        return host_entry(self).simd_reason

    def device_ptx(self, cc=(9, 0), **planes) -> str:
        """The PTX of the device launch kernel for the dtypes and shapes of ``planes`` (numpy
        arrays; Params as numbers), for compute capability ``cc``, compiled with the options and
        hooks a launch uses -- with numba-cuda, and no GPU or driver (``eagle.device_ptx``)."""
        return device_ptx(self, cc, **planes)

    # -- identity, pickling, artifacts -------------------------------------------------------
    def __repr__(self):
        args = ", ".join(f"{n}: {r!r}" for r, n in self.arg_spec)
        return f"<eagle plugin {self.name}({self.index_name}, {args}) access={self.exec_access}>"

    def __eq__(self, other):
        return isinstance(other, Plugin) and other.key == self.key

    def __hash__(self):
        return hash(self.key)

    def __reduce__(self):
        return (Plugin, (self.manifest, self.source))

    def save(self, path, key=None) -> str:
        """Write the plugin as an artifact: ``path/manifest.json`` beside ``path/kernel.py``; with
        ``key`` (bytes or str), signed: ``path/signature.json`` (``eagle.load(path, key=...)``)."""
        path = os.fspath(path)
        os.makedirs(path, exist_ok=True)
        files = {SOURCE: self.source.encode(),
                 MANIFEST: (json.dumps(self.manifest, indent=2, sort_keys=True) + "\n").encode()}
        for name, data in files.items():
            fd, tmp = tempfile.mkstemp(dir=path, prefix=f".{name}.")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, os.path.join(path, name))       # replaces a link, never writes through it
        if key is not None:
            write_signature(path, files, key)
        elif os.path.lexists(os.path.join(path, SIGNATURE)):
            os.unlink(os.path.join(path, SIGNATURE))        # it signed files that are gone
        return path


def deploy(k) -> Plugin:
    """Analyse a kernel, freeze the module-level numbers it reads, and return its plugin."""
    if isinstance(k, Plugin):
        return k
    if not isinstance(k, Kernel):
        k = _as_kernel(k)
    fdef = parse(k.source).body[0]
    # analysed first, so a refusal of the body names the kernel and the line at deploy (Plugin
    # re-derives the same); then the body's free names are frozen
    info = analyse(fdef, k.index_name, {n: r for r, n in k.arg_spec}, k.name, k.first_line, k.access)
    frozen = freeze_globals(k, fdef)
    for name, value in k.defaults.items():
        if not isinstance(value, NUMBER_TYPES):
            raise TypeError(f"kernel {k.name!r}: the default of Param {name!r} must be a number")
    cells = {name: role.op for role, name in k.arg_spec if role.kind == "Cell"}
    ops = set(cells.values())
    manifest = {
        "schema": SCHEMA,
        "name": k.name,
        "index": k.index_name,
        "arg_spec": [_role_to_json(r, n) for r, n in k.arg_spec],
        "defaults": {n: (v.item() if isinstance(v, np.generic) else v) for n, v in k.defaults.items()},
        "access": info.access,
        "declared_access": k.access,
        "op": ops.pop() if len(ops) == 1 else None,
        "cells": cells,
        "scalar_type": Plugin.scalar_type,
        "source_hash": _sha(k.source),
        "frozen": frozen,
        "fma": k.fma,
        "first_line": k.first_line,
        "eagle_version": __version__,
    }
    manifest[INTEGRITY] = field_hashes(manifest)
    plugin = Plugin(manifest, k.source)
    globals_source(plugin)          # a name meaning two things in the kernel and a helper: refused now
    return plugin


def save(plugin, path, key=None) -> str:
    """Save a plugin (or a kernel, deployed first) as an artifact in the directory ``path``; with
    ``key`` (bytes or str, kept secret), signed so that ``eagle.load(path, key=key)`` refuses any
    change to it.  See ``Plugin.save``."""
    return deploy(plugin).save(path, key=key)


def _read(path: str, where: str, key) -> tuple:
    """The manifest and source of the artifact ``path``, checked against ``key`` when given."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"eagle.load({path!r}): that is a file; an artifact is the directory holding "
                                 f"{MANIFEST} and {SOURCE}: pass the directory (here {os.path.dirname(path) or '.'!r})")
    try:
        raw = {name: read_inside(path, name, where) for name in (MANIFEST, SOURCE)}
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{path!r} is not an eagle plugin artifact: {e.filename} is missing") from None
    if key is not None:
        check_signature(path, raw, key, where)
    try:
        manifest = json.loads(raw[MANIFEST])
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: {MANIFEST} is not JSON ({e})") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{where}: {MANIFEST} holds a JSON {type(manifest).__name__}, not the object eagle "
                         "writes, so it is not an eagle manifest: save the plugin again with eagle.save(plugin, path)")
    try:
        return manifest, raw[SOURCE].decode()
    except UnicodeDecodeError as e:
        raise ValueError(f"{where}: {SOURCE} is not UTF-8 text ({e})") from None


def load(path, key=None, trust=False) -> Plugin:
    """Read a plugin artifact written by ``eagle.save`` / ``Plugin.save``.

    ``key``: the key it was saved with; the artifact is then refused unless every file is exactly
    as signed.  ``trust``: allow the artifact to import modules other than ``math``, ``cmath``,
    ``numpy``, ``numba`` and eagle's (importing a module runs its code); without it such an
    artifact is refused, naming the module.  See ``docs/artifacts.md`` for the trust model.
    """
    path = os.fspath(path)
    where = f"plugin artifact {path!r}"
    manifest, source = _read(path, where, key)
    try:
        verify(manifest, source)
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{where}: {e}") from None
    untrusted = [m for m in modules_named(manifest["frozen"]) if not trusted(m)]
    if untrusted and not trust:
        raise ValueError(f"{where}: manifest field 'frozen' imports module {untrusted[0]!r}, which is not one eagle "
                         f"kernels use ({', '.join(TRUSTED_MODULES)}); importing it runs its code as you: if you "
                         "trust the artifact and that module, load it with eagle.load(path, trust=True)")
    plugin = Plugin(manifest, source)
    for key_ in ("access", "op"):
        derived = plugin.exec_access if key_ == "access" else plugin.exec_op
        if manifest.get(key_) != derived:
            raise ValueError(f"{where}: manifest says {key_} {manifest.get(key_)!r}, the source gives {derived!r}")
    return plugin
