"""The host entry's source: the kernel body and its loop over samples, as a Python module.

The body is compiled with numba from the kernel's own source, rewritten in two ways only:
planes the body touches only as ``plane[i]`` are indexed ``plane[i - offset]`` (so a task may
hold only its slice while ``i`` stays the global sample index), and a cell ``c[i] = v``
writes into a 32-sample scratch row.  Module-level names are frozen into the module.  The
module is written to the cache directory under a name derived from the plugin's hash, so
numba's disk cache is valid across processes and never stale.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import sys
import tempfile

from . import __version__
from .reduction import IDENTITY, op_code

PO, CO = "_eagle_po", "_eagle_co"


def cache_dir() -> str:
    d = os.environ.get("EAGLE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "eagle")
    os.makedirs(d, exist_ok=True)
    return d


class _Rewrite(ast.NodeTransformer):
    def __init__(self, idx, sliced, cells):
        self.idx, self.sliced, self.cells = idx, sliced, cells

    def visit_Subscript(self, node):
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id in (self.sliced | self.cells):
            off = CO if node.value.id in self.cells else PO
            shifted = ast.BinOp(ast.Name(self.idx, ast.Load()), ast.Sub(), ast.Name(off, ast.Load()))
            sl = node.slice
            if isinstance(sl, ast.Name) and sl.id == self.idx:
                node.slice = shifted
            elif isinstance(sl, ast.Tuple) and isinstance(sl.elts[0], ast.Name) and sl.elts[0].id == self.idx:
                sl.elts[0] = shifted
        return node


def body_function(plugin, name="_eagle_body") -> str:
    """The body as a plain function ``name(i, *args, _eagle_po, _eagle_co)``."""
    fdef = ast.parse(plugin.source).body[0]
    fdef = _Rewrite(plugin.index_name, plugin.sliceable, set(plugin.cells)).visit(fdef)
    fdef.name = name
    fdef.decorator_list = []
    fdef.returns = None
    for a in fdef.args.args:
        a.annotation = None
    fdef.args.defaults = []
    fdef.args.args += [ast.arg(PO), ast.arg(CO)]
    ast.fix_missing_locations(fdef)
    return ast.unparse(fdef)


def _float_literal(v: float) -> str:
    if v == float("inf"):
        return "_eagle_np.inf"
    if v == float("-inf"):
        return "-_eagle_np.inf"
    return repr(v)


def globals_source(plugin, helper_decorator=None) -> str:
    """Imports, frozen constants and helper functions of the body, as module-level statements.

    Helpers compiled from source are decorated with ``helper_decorator`` (default: the host's
    ``@_eagle_njit`` with the kernel's options); their own globals come first.
    """
    if helper_decorator is None:
        helper_decorator = f"@_eagle_njit({jit_options(plugin)})"
    lines, seen = [], {}

    def emit(entries):
        for g in entries:
            name = g["name"]
            if name in seen:
                if seen[name] != g:
                    raise ValueError(f"kernel {plugin.name!r}: {name!r} means different things in the kernel "
                                     "and in a helper it calls; rename one of them")
                continue
            seen[name] = g
            if g["kind"] == "function":
                emit(g["frozen"])
                lines.extend([helper_decorator, g["source"]])
            else:
                lines.append(_global_line(g))

    emit(plugin.frozen)
    return "\n".join(lines)


def _global_line(g) -> str:
    name = g["name"]
    if g["kind"] == "module":
        return f"import {g['module']} as {name}"
    if g["kind"] == "import":
        return f"from {g['module']} import {g['attr']} as {name}"
    t, v = g["type"], g["value"]
    if t == "float":
        return f"{name} = float.fromhex({v!r})"
    if t == "complex":
        return f"{name} = complex(float.fromhex({v[0]!r}), float.fromhex({v[1]!r}))"
    if t in ("int", "bool"):
        return f"{name} = {v}"
    conv = f"float.fromhex({v!r})" if t.startswith("float") else v
    return f"{name} = _eagle_np.{t}({conv})"


def jit_options(plugin) -> str:
    opts = 'cache=True, nogil=True, error_model="numpy"'
    if plugin.fma:
        opts += ", fastmath={'contract'}"
    return opts


def body_raises(plugin) -> bool:
    """Whether the body has a raise or an assert (then the loop records the sample it is at)."""
    return any(isinstance(n, (ast.Raise, ast.Assert)) for n in ast.walk(ast.parse(plugin.source)))


def body_call_args(plugin) -> str:
    """The body's arguments as the loops pass them: planes and Params by name, each cell as its
    32-sample scratch row ``_eagle_c_<cell>`` (host and device loops alike)."""
    return ", ".join(f"_eagle_c_{name}" if name in plugin.cells else name for _, name in plugin.arg_spec)


def row_partial_lines(ind: str, cells: dict) -> list:
    """Fold the row ``[_eagle_r, _eagle_e)`` of each cell's scratch into its row partial pair, then
    move on to the next row (host and device loops alike)."""
    out = [f"{ind}_eagle_k = _eagle_r // 32 - _eagle_row0"]
    for c, op in cells.items():
        out += [f"{ind}_eagle_s, _eagle_t = _eagle_row_partial({op_code(op)}, "
                f"{_float_literal(IDENTITY[op])}, _eagle_c_{c}, _eagle_e - _eagle_r)",
                f"{ind}{c}[_eagle_k, 0] = _eagle_s",
                f"{ind}{c}[_eagle_k, 1] = _eagle_t"]
    out.append(f"{ind}_eagle_r = _eagle_e")
    return out


def host_source(plugin, lanes: int = 1) -> str:
    """The host module; with ``lanes > 1`` the tile runs groups of samples through the laned
    body (``eagle.lanes``) and the rest of each range one at a time."""
    from .lanes import group_loop, lanes_function
    args = [name for _, name in plugin.arg_spec]
    cells = plugin.cells
    body_args = body_call_args(plugin)
    track = "_eagle_prog[0] = _eagle_i" if body_raises(plugin) else ""
    opts = jit_options(plugin)
    out = [
        f"# Generated by eagle {__version__} for kernel {plugin.name!r} (key {plugin.key}); do not edit.",
        "import numpy as _eagle_np",
        "from numba import njit as _eagle_njit",
        "from eagle.reduction import row_partial as _eagle_row_partial",
        globals_source(plugin),
        "",
        f"@_eagle_njit({opts})",
        body_function(plugin),
        "",
        *([f"@_eagle_njit({opts})", lanes_function(plugin, lanes), ""] if lanes > 1 else []),
        f"@_eagle_njit({opts})",
        f"def _eagle_tile(_eagle_start, _eagle_stop, _eagle_po, _eagle_prog, {', '.join(args)}, _eagle_row0):",
    ]
    ind = "    "
    if not cells:
        out += group_loop(ind, "_eagle_start", "_eagle_stop", f"{body_args}, _eagle_po, 0", lanes, track)
    else:
        for c in cells:
            out.append(f"{ind}_eagle_c_{c} = _eagle_np.empty(32)")
        out += [f"{ind}_eagle_r = _eagle_start", f"{ind}while _eagle_r < _eagle_stop:",
                f"{ind*2}_eagle_e = min(_eagle_r + 32, _eagle_stop)"]
        for c, op in cells.items():
            out.append(f"{ind*2}_eagle_c_{c}[:] = {_float_literal(IDENTITY[op])}")
        out += group_loop(ind * 2, "_eagle_r", "_eagle_e", f"{body_args}, _eagle_po, _eagle_r", lanes, track)
        out += row_partial_lines(ind * 2, cells)
    return "\n".join(out) + "\n"


def load_module(tag: str, plugin, source: str):
    """Write ``source`` to the cache (once, atomically) and import it as a module."""
    # named by a hash of what it holds: a changed kernel, constant or eagle never reuses a stale file
    modname = f"eagle_{tag}_{plugin.name[:40]}_{hashlib.sha256(source.encode()).hexdigest()[:24]}"
    if modname in sys.modules:
        return sys.modules[modname]
    path = os.path.join(cache_dir(), modname + ".py")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[modname]
        raise
    return mod
