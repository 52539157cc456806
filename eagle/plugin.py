"""``eagle.deploy``: a kernel made into a plugin -- analysed, frozen, hashed, portable.

A plugin holds everything needed to run the kernel anywhere: its source, the roles of its
arguments, its access class, and the module-level names its body uses (numbers frozen as
constants, modules and compiled functions as imports).  It pickles by value (it can travel to
Dask workers) and saves as an artifact: ``plugin.save(dir)`` / ``eagle.load(dir)``.

Integrity: the manifest carries a SHA-256 of every other field (``integrity``), and the source
its own (``source_hash``).  Every plugin checks them when it is built -- at load, when it is
unpickled on a worker -- and refuses, naming the field, a manifest edited after deploy; the
roles and the frozen constants are then read back as data (``eagle.freeze.check_entry``).
"""
from __future__ import annotations

import ast
import hashlib
import json
import os

import numpy as np

from . import __version__
from .access import analyse
from .codegen import globals_source
from .freeze import NUMBER_TYPES, check_entry, freeze_globals
from .device_ptx import device_ptx
from .host import host_entry
from .kernel import Kernel, kernel as _as_kernel
from .roles import OUTPUT_KINDS, Cell, In, Mutable, Out, Param
from .syntax import parse

SCHEMA = 2
INTEGRITY = "integrity"
MANIFEST = "manifest.json"
SOURCE = "kernel.py"

def _role_to_json(role, name):
    return {"name": name, "kind": role.kind, "width": role.width,
            "dtype": role.dtype.name if role.dtype is not None else None, "op": role.op}


def _role_from_json(d):
    """A role read back through the roles' own checks (``Out[w, dtype]``, ``Cell[op]``)."""
    base = {"In": In, "Out": Out, "Mutable": Mutable, "Param": Param, "Cell": Cell}.get(d["kind"])
    if base is None:
        raise ValueError(f"argument {d['name']!r} has no role {d['kind']!r}")
    if d["kind"] == "Cell":
        return d["name"], base[d["op"]]
    sub = tuple(v for v in (d["width"], d["dtype"]) if v is not None)
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
    for g in manifest["frozen"]:
        check_entry(g)


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
                       manifest.get("declared_access"))
        self.exec_access = info.access
        self.reads_other_samples = info.reads_other_samples
        self.plane_uses = info.planes
        self.range_params = info.range_params
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
        """Samples the host engine runs in lockstep (1: one at a time, see ``host_lanes_reason``)."""
        return host_entry(self).lanes

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

    def save(self, path) -> str:
        """Write the plugin as an artifact: ``path/manifest.json`` beside ``path/kernel.py``."""
        path = os.fspath(path)
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, SOURCE), "w") as f:
            f.write(self.source)
        with open(os.path.join(path, MANIFEST), "w") as f:
            json.dump(self.manifest, f, indent=2, sort_keys=True)
            f.write("\n")
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


def load(path) -> Plugin:
    """Read a plugin artifact written by ``Plugin.save``."""
    path = os.fspath(path)
    mpath = os.path.join(path, MANIFEST)
    try:
        with open(mpath) as f:
            manifest = json.load(f)
        with open(os.path.join(path, SOURCE)) as f:
            source = f.read()
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{path!r} is not an eagle plugin artifact: {e.filename} is missing") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"plugin artifact {path!r}: {MANIFEST} is not JSON ({e})") from None
    try:
        verify(manifest, source)
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"plugin artifact {path!r}: {e}") from None
    plugin = Plugin(manifest, source)
    for key in ("access", "op"):
        derived = plugin.exec_access if key == "access" else plugin.exec_op
        if manifest.get(key) != derived:
            raise ValueError(f"plugin artifact {path!r}: manifest says {key} {manifest.get(key)!r}, "
                             f"the source gives {derived!r}")
    return plugin

