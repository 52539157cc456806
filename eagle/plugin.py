"""``eagle.deploy``: a kernel made into a plugin -- analysed, frozen, hashed, portable.

A plugin holds everything needed to run the kernel anywhere: its source, the roles of its
arguments, its access class, and the module-level names its body uses (numbers frozen as
constants, modules and compiled functions as imports).  It pickles by value (it can travel to
Dask workers) and saves as an artifact: ``plugin.save(dir)`` / ``eagle.load(dir)``.
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import inspect
import json
import os
import textwrap
import types

import numpy as np

from . import __version__
from .access import analyse
from .kernel import Kernel, kernel as _as_kernel
from .roles import Role

SCHEMA = 1
MANIFEST = "manifest.json"
SOURCE = "kernel.py"

_NUMBER_TYPES = (bool, int, float, complex, np.bool_, np.integer, np.floating, np.complexfloating)


def _free_names(fdef: ast.FunctionDef):
    """Names the body loads that it does not bind itself, in order of first use."""
    bound = {a.arg for a in fdef.args.args + fdef.args.posonlyargs}
    body = [node for stmt in fdef.body for node in ast.walk(stmt)]   # annotations are not the body's
    for node in body:
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.Lambda)) and node is not fdef:
            if isinstance(node, ast.FunctionDef):
                bound.add(node.name)
            bound.update(a.arg for a in node.args.args)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    seen = []
    for node in body:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in bound:
            if node.id not in seen:
                seen.append(node.id)
    return seen


def _freeze_value(kname, name, value, depth=0):
    """One global of the body as a manifest entry, or a refusal naming it."""
    if isinstance(value, _NUMBER_TYPES):
        t = type(value)
        tname = t.__name__ if t in (bool, int, float, complex) else np.dtype(t).name
        v = value.item() if isinstance(value, np.generic) else value
        if isinstance(v, float):
            text = v.hex()
        elif isinstance(v, complex):
            text = [v.real.hex(), v.imag.hex()]
        else:
            text = repr(v)
        return {"name": name, "kind": "const", "type": tname, "value": text}
    if isinstance(value, types.ModuleType):
        return {"name": name, "kind": "module", "module": value.__name__}
    if isinstance(value, np.ndarray):
        raise ValueError(f"kernel {kname!r} reads the module-level array {name!r}; arrays are not frozen "
                         f"into a kernel: pass it as a plane (an In argument) instead")
    if isinstance(value, Kernel):
        raise ValueError(f"kernel {kname!r} calls the kernel {name!r}; a kernel is launched by eagle, "
                         "not called from another one: use a @numba.njit helper")
    if isinstance(value, np.ufunc):
        return {"name": name, "kind": "import", "module": "numpy", "attr": value.__name__}
    py = getattr(value, "py_func", None)            # a numba dispatcher
    mod = getattr(py if py is not None else value, "__module__", None)
    attr = getattr(py if py is not None else value, "__name__", None)
    if callable(value) and mod and attr:
        builtin = py is None and (isinstance(value, types.BuiltinFunctionType) or mod in ("math", "cmath")
                                  or hasattr(value, "_numba_type_") or mod.startswith(("numpy", "numba")))
        importable = not (mod == "__main__" or mod.startswith("__"))
        if builtin or (py is not None and importable):
            return {"name": name, "kind": "import", "module": mod, "attr": attr}
        if isinstance(value, types.FunctionType) or py is not None:
            return _function_entry(kname, name, py if py is not None else value, depth)
    raise ValueError(f"kernel {kname!r} reads the module-level name {name!r} of type "
                     f"{type(value).__name__}; a kernel may use numbers (frozen at deploy), modules "
                     "and functions -- pass anything else as a plane or a Param")


def _function_entry(kname, name, fn, depth):
    """A helper the kernel calls, compiled from its source with the kernel (a function defined in
    ``__main__`` or a notebook cannot be imported on a worker; a plain Python function is not
    compiled yet).  Its own globals are frozen the same way."""
    if depth > 8:
        raise ValueError(f"kernel {kname!r}: helper functions nest more than 8 deep (at {name!r})")
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        raise ValueError(f"kernel {kname!r} calls {name!r}, whose source cannot be read; define it in a "
                         "file, a script or a notebook cell") from None
    fdef = ast.parse(src).body[0]
    if not isinstance(fdef, ast.FunctionDef) or fn.__name__ == "<lambda>":
        raise ValueError(f"kernel {kname!r} calls {name!r}, which is not a plain function (def ...)")
    fdef.decorator_list = []
    fdef.name = name
    nested = _freeze_names(kname, fdef, fn, depth + 1)
    return {"name": name, "kind": "function", "source": ast.unparse(fdef), "frozen": nested}


def _freeze_names(kname, fdef, fn, depth=0) -> list:
    """Resolve a function's free names: numbers frozen, modules imported, helpers compiled."""
    closure = {}
    if fn.__closure__:
        for var, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                closure[var] = cell.cell_contents
            except ValueError:
                pass
    frozen = []
    for name in _free_names(fdef):
        if name in closure:
            value = closure[name]
        elif name in fn.__globals__:
            value = fn.__globals__[name]
        elif hasattr(builtins, name):
            continue
        else:
            where = "the kernel" if depth == 0 else f"helper {fdef.name!r}"
            raise NameError(f"kernel {kname!r} uses {name!r}, which is not defined where {where} is")
        frozen.append(_freeze_value(kname, name, value, depth))
    return frozen


def freeze_globals(k: Kernel, fdef) -> list:
    """Resolve the body's free names at deploy: numbers frozen, modules and functions imported,
    helpers that cannot be imported compiled from their source."""
    return _freeze_names(k.name, fdef, k.fn)


def _role_to_json(role, name):
    return {"name": name, "kind": role.kind, "width": role.width,
            "dtype": role.dtype.name if role.dtype is not None else None, "op": role.op}


def _role_from_json(d):
    return d["name"], Role(d["kind"], d["width"], np.dtype(d["dtype"]) if d["dtype"] else None, d["op"])


def _sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


class Plugin:
    """A deployed kernel.  Build one with ``eagle.deploy(kernel)``."""

    scalar_type = "float64"

    def __init__(self, manifest: dict, source: str):
        self.manifest = manifest
        self.source = source
        self.name = manifest["name"]
        self.index_name = manifest["index"]
        self.arg_spec = tuple((role, name) for name, role in map(_role_from_json, manifest["arg_spec"]))
        self.roles = {name: role for role, name in self.arg_spec}
        self.defaults = dict(manifest.get("defaults", {}))
        self.frozen = manifest["frozen"]
        self.fma = manifest.get("fma", False)
        fdef = ast.parse(source).body[0]
        self._fdef = fdef
        info = analyse(fdef, self.index_name, self.roles, self.name, manifest.get("first_line", 1),
                       manifest.get("declared_access"))
        self.exec_access = info.access
        self.reads_other_samples = info.reads_other_samples
        self.plane_uses = info.planes
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
        return [name for role, name in self.arg_spec if role.kind in ("Out", "Mutable", "Cell")]

    @property
    def sliceable(self):
        """Planes the body touches only as plane[i] / plane[i, k]: a task may hold only its slice."""
        return {n for n, u in self.plane_uses.items() if u.own_only}

    @property
    def host(self):
        from .host import host_entry
        return host_entry(self)

    @property
    def host_lanes(self) -> int:
        """Samples the host entry runs in lockstep (1: one at a time, see ``host_lanes_reason``)."""
        return self.host.lanes

    @property
    def host_lanes_reason(self):
        """Why the host entry runs one sample at a time, or None when it runs lanes."""
        return self.host.lanes_reason

    @property
    def device(self):
        from .device import device_entry
        return device_entry(self)

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
    fdef = ast.parse(k.source).body[0]
    frozen = freeze_globals(k, fdef)
    for name, value in k.defaults.items():
        if not isinstance(value, _NUMBER_TYPES):
            raise TypeError(f"kernel {k.name!r}: the default of Param {name!r} must be a number")
    # analysed here so a refusal names the kernel at deploy (Plugin re-derives the same)
    cells = {name: role.op for role, name in k.arg_spec if role.kind == "Cell"}
    info = analyse(fdef, k.index_name, {n: r for r, n in k.arg_spec}, k.name, k.first_line, k.access)
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
    plugin = Plugin(manifest, k.source)
    from .codegen import globals_source
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
    if manifest.get("schema") != SCHEMA:
        raise ValueError(f"plugin artifact {path!r}: manifest schema version {manifest.get('schema')!r}, "
                         f"this eagle reads schema version {SCHEMA}")
    if _sha(source) != manifest.get("source_hash"):
        raise ValueError(f"plugin artifact {path!r}: the source of kernel {manifest.get('name')!r} does not "
                         "match the source_hash in its manifest (edited after it was saved?)")
    plugin = Plugin(manifest, source)
    for key in ("access", "op"):
        derived = plugin.exec_access if key == "access" else plugin.exec_op
        if manifest.get(key) != derived:
            raise ValueError(f"plugin artifact {path!r}: manifest says {key} {manifest.get(key)!r}, "
                             f"the source gives {derived!r}")
    return plugin

