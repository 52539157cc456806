"""Generated code shared by the engines: the kernel body and its frozen globals.

The body is compiled with numba from the kernel's own source, rewritten in two ways only:
planes the body touches only as ``plane[i]`` are indexed ``plane[i - offset]`` (so a task may
hold only its slice while ``i`` stays the global sample index), and a cell ``c[i] = v``
writes into a row's scratch (``eagle.rows``).  Every other index of a plane, and every index
of a ``Table`` (``t[i]`` included: a table is not cut by samples), is checked
(``eagle.bounds``), and so is every index of an array the body makes (``a[k]`` of a local name:
``eagle.bounds.local_at``).  Module-level names are frozen into the module.

The generated modules are cached on disk, named by a hash of their text and of what they
import, checked before they run and compiled once per host: ``eagle.cache`` (``load_module``).
"""
from __future__ import annotations

import ast

from .bounds import AT, ERR, LX, local_code
from .freeze import const_value
from .interrupt import is_poll
from .roles import PLANE_KINDS, TABLE
from .rows import scratch_name
from .syntax import parse

PO, CO = "_eagle_po", "_eagle_co"


class _Rewrite(ast.NodeTransformer):
    """A plane's own index shifted by the slice offset, a cell's by its row; every other index
    of a plane checked (``eagle.bounds``)."""

    def __init__(self, plugin):
        self.idx = plugin.index_name
        self.sliced, self.cells = plugin.sliceable, set(plugin.cells)
        self.code = {name: k for k, (role, name) in enumerate(plugin.arg_spec)
                     if role.kind in PLANE_KINDS or role.kind == TABLE}
        self.tables = {name for role, name in plugin.arg_spec if role.kind == TABLE}
        self.plugin, self.arguments = plugin, {name for _, name in plugin.arg_spec} | {self.idx}

    def _own(self, e):
        return isinstance(e, ast.Name) and e.id == self.idx

    def _checked(self, e, plane, axis):
        shape = ast.Subscript(ast.Attribute(ast.Name(plane, ast.Load()), "shape", ast.Load()),
                              ast.Constant(axis), ast.Load())
        return ast.Call(ast.Name(AT, ast.Load()), [e, shape, ast.Name(ERR, ast.Load()),
                                                   ast.Name(self.idx, ast.Load()), ast.Constant(self.code[plane]),
                                                   ast.Constant(axis)], [])

    def _local(self, node, name):
        """``a[k, m]`` of an array the body made: each index checked against ``a``'s own axis."""
        tuple_ = isinstance(node.slice, ast.Tuple)
        elts = list(node.slice.elts) if tuple_ else [node.slice]
        code = local_code(self.plugin, name)
        for axis, e in enumerate(elts):
            if not isinstance(e, ast.Slice):
                elts[axis] = ast.Call(ast.Name(LX, ast.Load()), [
                    ast.Name(name, ast.Load()), e, ast.Constant(axis), ast.Name(ERR, ast.Load()),
                    ast.Name(self.idx, ast.Load()), ast.Constant(code)], [])
        constant = isinstance(node.slice, ast.Constant) and type(node.slice.value) is int
        node.slice = ast.Tuple(elts, ast.Load()) if tuple_ else elts[0]
        if constant and isinstance(node.ctx, ast.Load):
            # t[0] of a tuple of mixed types needs its literal index: checked first, then read as written
            read = ast.Subscript(ast.Name(name, ast.Load()), ast.Constant(elts[0].args[1].value), ast.Load())
            return ast.Subscript(ast.Tuple([elts[0], read], ast.Load()), ast.Constant(1), ast.Load())
        return node

    def visit_Subscript(self, node):
        self.generic_visit(node)
        name = node.value.id if isinstance(node.value, ast.Name) else None
        if name is not None and name not in self.arguments:
            return self._local(node, name)
        if name not in self.code and name not in self.cells:
            return node
        tuple_ = isinstance(node.slice, ast.Tuple)
        elts = list(node.slice.elts) if tuple_ else [node.slice]
        for axis, e in enumerate(elts):
            if axis == 0 and self._own(e) and name not in self.tables:   # a table's t[i] is checked too
                if name in self.cells or name in self.sliced:
                    off = CO if name in self.cells else PO
                    elts[0] = ast.BinOp(ast.Name(self.idx, ast.Load()), ast.Sub(), ast.Name(off, ast.Load()))
            elif name in self.code and not isinstance(e, ast.Slice):
                elts[axis] = self._checked(e, name, axis)
        node.slice = ast.Tuple(elts, ast.Load()) if tuple_ else elts[0]
        return node


def body_function(plugin, name="_eagle_body") -> str:
    """The body as a plain function ``name(i, *args, _eagle_err, _eagle_po, _eagle_co)``."""
    fdef = parse(plugin.source).body[0]
    fdef.decorator_list = []                  # the roles' annotations are no subscripts of the body
    fdef.returns = None
    for a in fdef.args.args:
        a.annotation = None
    fdef = _Rewrite(plugin).visit(fdef)
    fdef.name = name
    fdef.args.defaults = []
    fdef.args.args += [ast.arg(ERR), ast.arg(PO), ast.arg(CO)]
    ast.fix_missing_locations(fdef)
    return ast.unparse(fdef)


def user_lines(plugin, module_source: str, name="_eagle_body") -> dict:
    """Lines of the generated body in ``module_source`` -> the user's lines of the same statements
    (the rewrite changes expressions only, so both walk the same statements in the same order;
    the statements the host adds to the body, its polls, are left out: ``eagle.interrupt``)."""
    fdef = next((n for n in parse(module_source).body
                 if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if fdef is None:
        return {}
    ours = [n for n in _statements(fdef.body) if not is_poll(n)]
    theirs = list(_statements(parse(plugin.source).body[0].body))
    first = plugin.manifest.get("first_line", 1)
    return {a.lineno: first + b.lineno - 1 for a, b in zip(ours, theirs)}


def _statements(body):
    """The statements of ``body``, depth first in source order (a poll's ``if`` without its inside)."""
    for s in body:
        yield s
        if isinstance(s, ast.If) and is_poll(s):
            continue
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(s, field, None)
            if isinstance(inner, list):
                yield from _statements(inner)
        for h in getattr(s, "handlers", []):
            yield from _statements(h.body)


def globals_source(plugin, helper_decorator=None) -> str:
    """Imports, frozen constants and helper functions of the body, as module-level statements.

    Helpers compiled from source are decorated with ``helper_decorator`` (default: the host's
    ``@_eagle_njit`` with the kernel's options and numba's bounds checks -- a plane passed to a
    helper is indexed there, out of the body's rewrite); their own globals come first.
    """
    if helper_decorator is None:
        helper_decorator = f"@_eagle_njit({jit_options(plugin)}, boundscheck=True)"
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
    value = const_value(g)                      # parsed as data: never pasted as text
    t = g["type"]
    if isinstance(value, (bool, int)) and t in ("bool", "int"):
        return f"{name} = {value!r}"
    if isinstance(value, float) and t == "float":
        return f"{name} = float.fromhex({value.hex()!r})"
    if isinstance(value, complex):
        return f"{name} = complex(float.fromhex({value.real.hex()!r}), float.fromhex({value.imag.hex()!r}))"
    if value.dtype.kind == "c":
        return (f"{name} = _eagle_np.{value.dtype.name}(complex(float.fromhex({float(value.real).hex()!r}), "
                f"float.fromhex({float(value.imag).hex()!r})))")
    if value.dtype.kind == "f":
        return f"{name} = _eagle_np.{value.dtype.name}(float.fromhex({float(value).hex()!r}))"
    return f"{name} = _eagle_np.{value.dtype.name}({int(value)!r})"


def jit_options(plugin) -> str:
    opts = 'cache=True, nogil=True, error_model="numpy"'
    if plugin.fma:
        opts += ", fastmath={'contract'}"
    return opts


def body_raises(plugin) -> bool:
    """Whether the body has a raise or an assert (then the loop records the sample it is at)."""
    return any(isinstance(n, (ast.Raise, ast.Assert)) for n in ast.walk(parse(plugin.source)))


def body_call_args(plugin) -> str:
    """The body's arguments as the loops pass them: planes and Params by name, each cell as its
    scratch row, then the run's error record (host and device loops alike)."""
    return ", ".join([scratch_name(name) if name in plugin.cells else name for _, name in plugin.arg_spec] + [ERR])
