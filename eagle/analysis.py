"""What the host transforms (``eagle.lanes``, ``eagle.simd``) read from a body before rewriting it.

Both work on the rewritten body (``codegen.body_function``) and share one analysis:

* ``fallback_reason``: kernels that run one sample at a time whatever their body (they write other
  samples, or raise: the loop records the sample it is at);
* ``strip_bare_return`` and ``Refused``: the constructs neither transform handles;
* ``stores``, ``own_exits``, ``parents``, ``exits_to_flag``: small facts about statements;
* ``Uniformity``: which locals hold the same value for every sample (uniform) and which are the
  sample's own, whether an expression, a statement, an ``if`` or a loop is uniform.  A local is
  uniform when every assignment to it is a plain ``name = expr`` of uniform values (constants,
  Params, frozen numbers, ``plane.shape``/``len(plane)``, uniform locals, arithmetic, ``math``
  functions) made under uniform control flow; a loop is uniform when its header is and no sample
  may leave it early (a ``break`` under a per-sample test).
"""
from __future__ import annotations

import ast

from .access import CROSS_SAMPLE_WRITE
from .codegen import body_raises
from .roles import PLANE_KINDS
from .syntax import parse

_UNIFORM_BUILTINS = {"abs", "min", "max", "int", "float", "bool", "len"}
_PLANE_ATTRS = {"shape", "ndim", "size"}
#: what a deployed body may hold (``eagle.access.UNSUPPORTED`` refuses the rest at deploy) and the
#: transforms do not handle
_REFUSED = {ast.Delete: "del"}
if hasattr(ast, "Match"):
    _REFUSED[ast.Match] = "match"


class Refused(Exception):
    """The body uses something the transform does not handle; the message says what."""


def fallback_reason(plugin):
    """Why a kernel must run one sample at a time whatever its body looks like, or None."""
    if plugin.exec_access == CROSS_SAMPLE_WRITE:
        return "writes other samples' planes (cross_sample_write): runs in sample order"
    if body_raises(plugin):
        return "raises or asserts: the loop records the sample it is at"
    return None


def stores(node) -> set:
    """Names bound anywhere inside ``node``."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def own_exits(body):
    """break/continue statements in ``body`` that belong to the loop owning ``body``."""
    for s in body:
        if isinstance(s, (ast.Break, ast.Continue)):
            yield s
        elif isinstance(s, ast.If):
            yield from own_exits(s.body)
            yield from own_exits(s.orelse)
        elif isinstance(s, (ast.For, ast.While)):
            yield from own_exits(s.orelse)      # a nested loop's else belongs to this loop


def parents(tree) -> dict:
    """Each node of ``tree`` -> the node that holds it."""
    out = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            out[child] = node
    return out


def strip_bare_return(fdef):
    """Drop a final bare ``return`` (it does nothing) from ``fdef``, in place."""
    body = fdef.body
    if body and isinstance(body[-1], ast.Return) and body[-1].value is None:
        body.pop()


def refuse_constructs(fdef):
    """Raise ``Refused`` for what neither transform handles: ``del``, ``match``, an early
    ``return``, a raise or an assert (after ``strip_bare_return``)."""
    for node in ast.walk(fdef):
        if node is fdef:
            continue
        for t, what in _REFUSED.items():
            if isinstance(node, t):
                raise Refused(f"the body uses {what}, which the lane transform does not handle")
        if isinstance(node, ast.Return):
            raise Refused("the body returns before its end, which the lane transform does not handle")
        if isinstance(node, (ast.Raise, ast.Assert)):
            raise Refused("raises or asserts: the loop records the sample it is at")


def exits_to_flag(body, flag):
    """One sample's body of a masked loop, its own ``break`` clearing ``flag`` and leaving this
    iteration, its ``continue`` leaving this iteration (both through a one-pass wrapper loop the
    caller adds)."""
    out = []
    for s in body:
        if isinstance(s, ast.Break):
            out += [parse(f"{flag} = False").body[0], ast.Break()]
            continue
        if isinstance(s, ast.Continue):
            out.append(ast.Break())
            continue
        if isinstance(s, ast.If):
            s.body = exits_to_flag(s.body, flag)
            s.orelse = exits_to_flag(s.orelse, flag)
        elif isinstance(s, (ast.For, ast.While)):
            s.orelse = exits_to_flag(s.orelse, flag)
        out.append(s)
    return out


class Uniformity:
    """The names of a body (``fdef``, the rewritten body of ``plugin``) and which are uniform.

    ``idx`` the sample's index, ``args`` the other parameters, ``params`` / ``planes`` / ``consts``
    by role, ``local`` the names the body binds, ``uniform`` the uniform locals, ``per_sample``
    the rest (with ``idx``).  Refuses (``Refused``) what the transforms do not handle; strips a
    final bare return from ``fdef``."""

    def __init__(self, plugin, fdef):
        self.fdef = fdef
        self.idx = fdef.args.args[0].arg
        self.args = [a.arg for a in fdef.args.args[1:]]
        roles = plugin.roles
        self.params = {n for n, r in roles.items() if r.kind == "Param"}
        self.planes = {n for n, r in roles.items() if r.kind in PLANE_KINDS}
        self.frozen_names = {g["name"] for g in plugin.frozen}
        self.consts = {g["name"] for g in plugin.frozen if g["kind"] == "const"}
        self.math = {g["name"] for g in plugin.frozen if g["kind"] == "module" and g["module"] == "math"}
        self.math_funcs = {g["name"] for g in plugin.frozen if g["kind"] == "import" and g["module"] == "math"}
        strip_bare_return(fdef)
        refuse_constructs(fdef)
        self.local = stores(fdef) - {self.idx}
        self.uniform = self._uniform_names()
        self.per_sample = (self.local - self.uniform) | {self.idx}

    def expr(self, e, U=None) -> bool:
        """True when ``e`` has the same value for every sample (and is a number or a tuple), the
        uniform locals being ``U`` (default: ``self.uniform``)."""
        U = self.uniform if U is None else U
        if isinstance(e, ast.Constant):
            return True
        if isinstance(e, ast.Name):
            if e.id in self.local:
                return e.id in U
            return e.id in self.params or e.id in self.consts
        if isinstance(e, ast.Attribute):
            return (e.attr in _PLANE_ATTRS and isinstance(e.value, ast.Name) and e.value.id in self.planes
                    and e.value.id not in self.local)
        if isinstance(e, ast.Call):
            return self._call(e, U)
        parts = {ast.Subscript: lambda: [e.value, e.slice], ast.BinOp: lambda: [e.left, e.right],
                 ast.UnaryOp: lambda: [e.operand], ast.BoolOp: lambda: e.values,
                 ast.Compare: lambda: [e.left, *e.comparators], ast.IfExp: lambda: [e.test, e.body, e.orelse],
                 ast.Tuple: lambda: e.elts}.get(type(e))
        return parts is not None and all(self.expr(v, U) for v in parts())

    def _call(self, e, U) -> bool:
        if e.keywords:
            return False
        f = e.func
        if isinstance(f, ast.Name):
            if f.id in self.local or f.id in self.args:
                return False
            if f.id == "len" and f.id not in self.frozen_names:
                a = e.args[0] if len(e.args) == 1 else None
                return isinstance(a, ast.Name) and a.id in self.planes and a.id not in self.local
            ok = f.id in self.math_funcs or (f.id in _UNIFORM_BUILTINS and f.id not in self.frozen_names)
        elif isinstance(f, ast.Attribute):
            ok = isinstance(f.value, ast.Name) and f.value.id in self.math and f.value.id not in self.local
        else:
            ok = False
        return ok and all(self.expr(a, U) for a in e.args)

    def range_call(self, it, U=None) -> bool:
        """Whether ``it`` is ``range(...)`` of uniform values."""
        U = self.uniform if U is None else U
        return (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                and "range" not in self.local and not it.keywords and 1 <= len(it.args) <= 3
                and all(self.expr(a, U) for a in it.args))

    def _uniform_names(self):
        U = set(self.local)
        while True:
            demote = set()
            self._scan(self.fdef.body, True, U, demote)
            if not demote & U:
                return U
            U -= demote

    def _assignment(self, s, uni, U, demote):
        targets = s.targets if isinstance(s, ast.Assign) else [s.target]
        plain = all(isinstance(m, (ast.Name, ast.Tuple, ast.expr_context)) for t in targets for m in ast.walk(t))
        value = s.value
        ok = uni and plain and value is not None and self.expr(value, U)
        if isinstance(s, ast.AugAssign):
            ok = ok and isinstance(s.target, ast.Name) and s.target.id in U
        demote |= stores(value) if ok else stores(s)
        for t in targets:                      # a name mutated through a subscript or attribute
            for m in ast.walk(t):
                if isinstance(m, (ast.Subscript, ast.Attribute)) and isinstance(m.value, ast.Name):
                    demote.add(m.value.id)

    def _scan(self, body, uni, U, demote):
        """Walk statements under (uni)form or per-sample control; collect names that cannot be
        uniform.  Returns True when a break/continue of the enclosing loop sits under per-sample
        control."""
        lane_exit = False
        for s in body:
            if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                self._assignment(s, uni, U, demote)
            elif isinstance(s, ast.If):
                u = uni and self.expr(s.test, U)
                demote |= stores(s.test)
                lane_exit |= self._scan(s.body, u, U, demote) | self._scan(s.orelse, u, U, demote)
            elif isinstance(s, (ast.For, ast.While)):
                head = s.iter if isinstance(s, ast.For) else s.test
                demote |= stores(head)
                if isinstance(s, ast.For):
                    u = uni and isinstance(s.target, ast.Name) and s.target.id in U and self.range_call(s.iter, U)
                else:
                    u = uni and self.expr(s.test, U)
                if u and self._scan(s.body, True, U, set()):
                    u = False                          # a sample may leave it early: per sample
                if not u and isinstance(s, ast.For):
                    demote |= stores(s.target)
                self._scan(s.body, u, U, demote)
                lane_exit |= self._scan(s.orelse, u, U, demote)
            elif isinstance(s, (ast.Break, ast.Continue)):
                lane_exit |= not uni
            else:                                      # Expr, Pass
                demote |= stores(s)
        return lane_exit

    def statement(self, s) -> bool:
        """Whether ``s`` assigns uniform names only (run once for every sample)."""
        if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            names = stores(s)
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            return (bool(names) and names <= self.uniform and
                    not any(isinstance(m, (ast.Subscript, ast.Attribute, ast.Starred))
                            for t in targets for m in ast.walk(t)))
        return False

    def branch(self, s) -> bool:
        """Whether the ``if`` ``s`` has a uniform test."""
        return self.expr(s.test)

    def loop(self, s) -> bool:
        """Whether the loop ``s`` has a uniform header and no per-sample exit."""
        if isinstance(s, ast.For):
            return (isinstance(s.target, ast.Name) and s.target.id in self.uniform
                    and self.range_call(s.iter) and not self.sample_exit(s.body))
        return self.expr(s.test) and not self.sample_exit(s.body)

    def sample_exit(self, body) -> bool:
        """Whether a sample may leave the loop owning ``body`` early (an exit under per-sample
        control)."""
        return self._scan(body, True, self.uniform, set())
