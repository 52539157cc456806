"""A float stored into an integer plane: compiled code truncates it toward zero (numpy's rule for
``int_array[k] = 2.5``), which is rarely what the kernel meant.  ``warn_truncating_stores`` warns,
once per kernel and plane dtypes, naming the kernel, the line and the plane, when a run's body
stores a value that is surely a float into an integer (or bool) ``Out``/``Mutable`` plane.

"Surely" is read from the body's source and the run's dtypes, without compiling: a float literal,
a true division, ``float()``, a ``math`` function that returns a float, a float plane or Param,
arithmetic with one of these, or a name only ever assigned such values.  ``int()``, ``round(x)``,
``math.floor``/``ceil``/``trunc``, a helper's result and anything else it cannot tell are not
warned about.
"""
from __future__ import annotations

import ast
import threading
import warnings

import numpy as np

from .roles import OUTPUT_KINDS
from .syntax import parse

#: what an expression surely is: a float, or something else (an integer, or not known)
FLOAT, OTHER = "float", "other"
#: ``math`` functions that do not return a float
_MATH_NOT_FLOAT = {"floor", "ceil", "trunc", "factorial", "gcd", "isqrt", "comb", "perm", "isnan", "isinf",
                   "isfinite", "isclose"}

_WARNED: set = set()
_LOCK = threading.Lock()


class TruncationWarning(UserWarning):
    """A kernel stores a float into an integer plane: the value is truncated toward zero."""


def _combine(*kinds):
    return FLOAT if FLOAT in kinds else OTHER


class _Kinds:
    """Whether the body's expressions are surely floats, read in program order."""

    def __init__(self, index, dtypes, params):
        self.index, self.dtypes, self.params, self.names = index, dtypes, params, {index: OTHER}

    def of(self, node) -> str:
        if isinstance(node, ast.Constant):
            return FLOAT if isinstance(node.value, (float, complex)) else OTHER
        if isinstance(node, ast.Name):
            return self._name(node.id)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            dt = self.dtypes.get(node.value.id)
            return FLOAT if dt is not None and dt.kind in "fc" else OTHER
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Div):
                return FLOAT
            return _combine(self.of(node.left), self.of(node.right))
        if isinstance(node, ast.UnaryOp):
            return OTHER if isinstance(node.op, ast.Not) else self.of(node.operand)
        if isinstance(node, ast.IfExp):
            return _combine(self.of(node.body), self.of(node.orelse))
        if isinstance(node, ast.Call):
            return self._call(node)
        return OTHER

    def _name(self, name):
        if name in self.names:
            return self.names[name]
        v = self.params.get(name)
        return FLOAT if isinstance(v, (float, complex, np.floating, np.complexfloating)) else OTHER

    def _call(self, node):
        f = node.func
        if isinstance(f, ast.Name):
            if f.id == "float":
                return FLOAT
            if f.id in ("abs", "min", "max"):
                return _combine(*(self.of(a) for a in node.args))
            if f.id == "round" and len(node.args) > 1:       # round(x, 2) of a float is a float
                return self.of(node.args[0])
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "math":
            return OTHER if f.attr in _MATH_NOT_FLOAT else FLOAT
        return OTHER                                          # int(), round(), a helper: not surely a float

    def assign(self, target, kind):
        """A name is surely a float only while every assignment to it seen so far is one."""
        if isinstance(target, ast.Name):
            old = self.names.get(target.id)
            self.names[target.id] = kind if old in (None, kind) else OTHER
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self.assign(t, OTHER)


def truncating_stores(fdef, index, dtypes, params) -> list:
    """``[(plane, line, text)]``: the stores of ``fdef`` that put a float into an integer plane of
    ``dtypes`` (``{plane: dtype}``, integer output planes only), its statements read in order."""
    kinds, found = _Kinds(index, dtypes, params), []
    _statements(fdef.body, kinds, found, dtypes)
    return found


def _statements(body, kinds, found, dtypes):
    for node in body:
        if isinstance(node, ast.Assign):
            if isinstance(node.value, ast.Tuple) and all(isinstance(t, ast.Tuple) for t in node.targets):
                for tgt in node.targets:                  # a, b = x, y: each its own kind
                    for t, v in zip(tgt.elts, node.value.elts):
                        kinds.assign(t, kinds.of(v))
                        _note(t, kinds.of(v), node, found, dtypes)
                continue
            value = kinds.of(node.value)
            for t in node.targets:
                kinds.assign(t, value)
                _note(t, value, node, found, dtypes)
        elif isinstance(node, ast.AugAssign):
            value = FLOAT if isinstance(node.op, ast.Div) else _combine(kinds.of(node.target), kinds.of(node.value))
            kinds.assign(node.target, value)
            _note(node.target, value, node, found, dtypes)
        elif isinstance(node, ast.For):
            kinds.assign(node.target, OTHER)
        for field in ("body", "orelse"):
            inner = getattr(node, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                _statements(inner, kinds, found, dtypes)


def _note(target, kind, node, found, dtypes):
    if kind == FLOAT and isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
            and target.value.id in dtypes:
        found.append((target.value.id, node.lineno, ast.unparse(node)))


def warn_truncating_stores(plugin, values: dict):
    """Warn (``TruncationWarning``, once per kernel and dtypes) for each integer output plane of a
    run into which the body stores a float."""
    dtypes = {name: np.dtype(v.dtype) for name, v in values.items()
              if plugin.roles[name].kind in OUTPUT_KINDS and hasattr(v, "dtype") and np.dtype(v.dtype).kind in "iub"}
    if not dtypes:
        return
    params = {name: v for name, v in values.items() if plugin.roles[name].kind == "Param"}
    key = (plugin.key, tuple(sorted((n, d.str) for n, d in dtypes.items())),
           tuple(sorted((n, type(v).__name__) for n, v in params.items())))
    with _LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    fdef, first_line = parse(plugin.source).body[0], plugin.manifest.get("first_line", 1)
    for plane, line, text in truncating_stores(fdef, plugin.index_name, dtypes, params):
        role = plugin.roles[plane].kind
        warnings.warn(
            f"kernel {plugin.name!r} line {line + first_line - 1}, {text}: stores a float into {role} {plane!r}, "
            f"which holds {dtypes[plane]}: each value is truncated toward zero (numpy's rule); pass "
            f"{plane}.astype('float64'), or convert in the body (int(...), round(...))",
            TruncationWarning, stacklevel=5)
