"""Host lanes: a kernel body rewritten to run L samples in lockstep, with the same bits.

A body compiled one sample after another is latency-bound: each step of a loop waits for the
previous one.  ``_eagle_body_lanes(i0, ...)`` runs samples ``i0 .. i0 + L - 1`` together, so the
core overlaps their independent chains.  It is a source-to-source transform of the (already
rewritten, see ``codegen.body_function``) body that keeps each sample's own sequence of
operations exactly as in the one-at-a-time body -- no operation is reordered, merged or
selected -- so every sample gets the same bits:

* every name the body binds (and the index ``i``) is renamed per lane (``v`` -> ``v__eagle_l3``,
  ``i`` -> ``i0 + 3``); planes, Params, frozen globals and *uniform* locals are shared.  A local
  is uniform when every assignment to it is a plain ``name = expr`` of uniform values (constants,
  Params, frozen numbers, ``plane.shape``/``len(plane)``, uniform locals, arithmetic, ``math``
  functions) made under uniform control flow;
* a straight-line statement is replicated once per lane, lanes interleaved statement by
  statement (an assignment to uniform names runs once);
* a loop whose header is uniform (``for _ in range(steps)``) stays one loop with the replicated
  body inside -- this is what lets the lanes' chains overlap; an ``if`` on a uniform test stays
  one ``if``;
* an ``if``, or a ``for`` with per-sample bounds, runs as one copy per lane (each lane its own
  branch: no select, so side effects stay exact);
* a ``while`` on per-sample values becomes a masked lockstep loop: each lane has an active flag,
  tests its condition and runs its body while active; ``break`` clears that lane's flag and
  ``continue`` ends that lane's iteration (the ``else`` clause runs when the condition fails).

Samples of one group interleave their statements, so a kernel whose samples could see each
other's writes (``cross_sample_write``) and one that raises (the loop records the sample it is
at) run one at a time; so does a body using a construct the transform does not handle.  (Draws
from ``eagle.random`` are pure functions of the sample and a counter, so they lane; stateful
generators are refused at deploy, ``eagle.freeze``.)  ``choose`` says which, with a reason:
``plugin.host_lanes`` / ``plugin.host_lanes_reason``.  ``EAGLE_HOST_LANES`` (read when a host
entry is built) forces a lane count; ``EAGLE_HOST_LANES=1`` runs one sample at a time.  A laned
body numba does not compile falls back too (``HostEntry._compile``).

The laned code is compiled like the one-at-a-time body: no fastmath, so LLVM neither contracts
``a*b + c`` into a fused multiply-add nor reassociates (the tests check the machine code).
``@eagle.kernel(fma=True)`` allows contraction for one kernel: its bits then differ from numpy's,
but every expression is contracted alike in the laned and the one-at-a-time body, so they are
still the same on every split (tested).
"""
from __future__ import annotations

import ast
import copy
import os

from .syntax import parse
from .access import CROSS_SAMPLE_WRITE
from .codegen import body_function, body_raises
from .roles import PLANE_KINDS
from .rows import ROW

ENV = "EAGLE_HOST_LANES"
ALLOWED = tuple(k for k in (1, 2, 4, 8, 16) if ROW % k == 0)   # a lane group never straddles a row
DEFAULT, SMALL = 8, 4
BIG_BODY = 400          # AST nodes: a bigger body runs SMALL lanes (compile time, code size)
LOOP_STATE = 2          # per-lane names a loop may carry at DEFAULT lanes; more run SMALL lanes
#                         (16 vector registers: 8 lanes x 3 chains spill, and a spill lengthens a chain)
I0 = "_eagle_i0"

_UNIFORM_BUILTINS = {"abs", "min", "max", "int", "float", "bool", "len"}
_PLANE_ATTRS = {"shape", "ndim", "size"}
#: what a deployed body may hold (``eagle.access.UNSUPPORTED`` refuses the rest at deploy) and the
#: transform does not handle
_REFUSED = {ast.Delete: "del"}
if hasattr(ast, "Match"):
    _REFUSED[ast.Match] = "match"


class Refused(Exception):
    """The body uses something the transform does not handle; the message says what."""


def lane_name(name: str, k: int) -> str:
    return f"{name}__eagle_l{k}"


def _env_lanes():
    text = os.environ.get(ENV)
    if not text:
        return None
    try:
        n = int(text)
    except ValueError:
        n = None
    if n not in ALLOWED:
        raise ValueError(f"{ENV}={text!r}: the host lane count is one of {', '.join(map(str, ALLOWED))}")
    return n


def _fallback_reason(plugin):
    """Why a kernel must run one sample at a time whatever its body looks like, or None."""
    if plugin.exec_access == CROSS_SAMPLE_WRITE:
        return "writes other samples' planes (cross_sample_write): runs in sample order"
    if body_raises(plugin):
        return "raises or asserts: the loop records the sample it is at"
    return None


def choose(plugin, want=None):
    """``(lanes, reason)`` for the plugin's host entry: ``lanes == 1`` with the reason when it
    runs one sample at a time, else ``reason`` is None.  ``want`` (or ``EAGLE_HOST_LANES``)
    forces the count."""
    if want is None:
        want = _env_lanes()
    elif want not in ALLOWED:
        raise ValueError(f"host lanes={want!r}: one of {', '.join(map(str, ALLOWED))}")
    if want == 1:
        return 1, f"one sample at a time was asked for ({ENV}=1)"
    reason = _fallback_reason(plugin)
    if reason:
        return 1, reason
    fdef = parse(body_function(plugin)).body[0]
    try:
        t = _Lanes(plugin, fdef, DEFAULT)
        lanes = want or t.preferred()
        t.function()
    except Refused as e:
        return 1, str(e)
    return lanes, None


def lanes_function(plugin, lanes: int) -> str:
    """Source of ``_eagle_body_lanes(_eagle_i0, *args, _eagle_po, _eagle_co)``."""
    fdef = parse(body_function(plugin)).body[0]
    return ast.unparse(_Lanes(plugin, fdef, lanes).function())


# --- the transform ----------------------------------------------------------------------------

def _stores(node):
    """Names bound anywhere inside ``node``."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _own_exits(body):
    """break/continue statements in ``body`` that belong to the loop owning ``body``."""
    for s in body:
        if isinstance(s, (ast.Break, ast.Continue)):
            yield s
        elif isinstance(s, ast.If):
            yield from _own_exits(s.body)
            yield from _own_exits(s.orelse)
        elif isinstance(s, (ast.For, ast.While)):
            yield from _own_exits(s.orelse)      # a nested loop's else belongs to this loop


class _Lanes:
    def __init__(self, plugin, fdef, lanes):
        self.lanes = lanes
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
        self._refuse_constructs()
        self.local = _stores(fdef) - {self.idx}
        self.uniform = self._uniform_names()
        self.per_lane = (self.local - self.uniform) | {self.idx}
        self._loops = 0

    # -- what the transform refuses -------------------------------------------------------
    def _refuse_constructs(self):
        body = self.fdef.body
        if body and isinstance(body[-1], ast.Return) and body[-1].value is None:
            body.pop()                               # a final bare return does nothing
        for node in ast.walk(self.fdef):
            if node is self.fdef:
                continue
            for t, what in _REFUSED.items():
                if isinstance(node, t):
                    raise Refused(f"the body uses {what}, which the lane transform does not handle")
            if isinstance(node, ast.Return):
                raise Refused("the body returns before its end, which the lane transform does not handle")
            if isinstance(node, (ast.Raise, ast.Assert)):
                raise Refused("raises or asserts: the loop records the sample it is at")

    def preferred(self) -> int:
        """The lane count for this body: SMALL for a big body or for loops carrying many per-lane
        values (they would not fit in registers at DEFAULT lanes), else DEFAULT."""
        if sum(1 for _ in ast.walk(self.fdef)) > BIG_BODY:
            return SMALL
        carried = 0
        for node in ast.walk(self.fdef):
            if isinstance(node, (ast.For, ast.While)):
                names = {n.id for b in node.body for n in ast.walk(b)
                         if isinstance(n, ast.Name) and n.id in self.per_lane and n.id != self.idx}
                carried = max(carried, len(names))
        return SMALL if carried > LOOP_STATE else DEFAULT

    # -- uniformity --------------------------------------------------------------------------
    def _uniform_expr(self, e, U) -> bool:
        """True when ``e`` has the same value in every lane (and is a number or a tuple)."""
        if isinstance(e, ast.Constant):
            return True
        if isinstance(e, ast.Name):
            if e.id in self.local:
                return e.id in U
            return e.id in self.params or e.id in self.consts
        if isinstance(e, ast.Attribute):
            return (e.attr in _PLANE_ATTRS and isinstance(e.value, ast.Name) and e.value.id in self.planes
                    and e.value.id not in self.local)
        if isinstance(e, ast.Subscript):
            return self._uniform_expr(e.value, U) and self._uniform_expr(e.slice, U)
        if isinstance(e, ast.BinOp):
            return self._uniform_expr(e.left, U) and self._uniform_expr(e.right, U)
        if isinstance(e, ast.UnaryOp):
            return self._uniform_expr(e.operand, U)
        if isinstance(e, ast.BoolOp):
            return all(self._uniform_expr(v, U) for v in e.values)
        if isinstance(e, ast.Compare):
            return all(self._uniform_expr(v, U) for v in [e.left, *e.comparators])
        if isinstance(e, ast.IfExp):
            return all(self._uniform_expr(v, U) for v in (e.test, e.body, e.orelse))
        if isinstance(e, ast.Tuple):
            return all(self._uniform_expr(v, U) for v in e.elts)
        if isinstance(e, ast.Call) and not e.keywords:
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
            return ok and all(self._uniform_expr(a, U) for a in e.args)
        return False

    def _uniform_range(self, it, U) -> bool:
        return (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                and "range" not in self.local and not it.keywords and 1 <= len(it.args) <= 3
                and all(self._uniform_expr(a, U) for a in it.args))

    def _uniform_names(self):
        U = set(self.local)
        while True:
            demote = set()
            self._scan(self.fdef.body, True, U, demote)
            if not demote & U:
                return U
            U -= demote

    def _scan(self, body, uni, U, demote):
        """Walk statements under (uni)form or per-lane control; collect names that cannot be uniform.
        Returns True when a break/continue of the enclosing loop sits under per-lane control."""
        lane_exit = False
        for s in body:
            if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                plain = all(isinstance(m, (ast.Name, ast.Tuple, ast.expr_context))
                            for t in targets for m in ast.walk(t))
                value = s.value
                ok = uni and plain and value is not None and self._uniform_expr(value, U)
                if isinstance(s, ast.AugAssign):
                    ok = ok and isinstance(s.target, ast.Name) and s.target.id in U
                if not ok:
                    demote |= _stores(s)
                else:
                    demote |= _stores(value)
                # a name mutated through a subscript or attribute is never uniform
                for t in targets:
                    for m in ast.walk(t):
                        if isinstance(m, (ast.Subscript, ast.Attribute)) and isinstance(m.value, ast.Name):
                            demote.add(m.value.id)
            elif isinstance(s, ast.If):
                u = uni and self._uniform_expr(s.test, U)
                demote |= _stores(s.test)
                lane_exit |= self._scan(s.body, u, U, demote) | self._scan(s.orelse, u, U, demote)
            elif isinstance(s, (ast.For, ast.While)):
                head = s.iter if isinstance(s, ast.For) else s.test
                demote |= _stores(head)
                if isinstance(s, ast.For):
                    u = (uni and isinstance(s.target, ast.Name) and s.target.id in U
                         and self._uniform_range(s.iter, U))
                else:
                    u = uni and self._uniform_expr(s.test, U)
                if u and self._scan(s.body, True, U, set()):
                    u = False                          # a lane may leave it early: per lane
                if not u and isinstance(s, ast.For):
                    demote |= _stores(s.target)
                self._scan(s.body, u, U, demote)
                lane_exit |= self._scan(s.orelse, u, U, demote)
            elif isinstance(s, (ast.Break, ast.Continue)):
                lane_exit |= not uni
            else:                                      # Expr, Pass
                demote |= _stores(s)
        return lane_exit

    def _is_uniform_stmt(self, s) -> bool:
        if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            names = _stores(s)
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            return (bool(names) and names <= self.uniform and
                    not any(isinstance(m, (ast.Subscript, ast.Attribute, ast.Starred))
                            for t in targets for m in ast.walk(t)))
        return False

    def _uniform_if(self, s) -> bool:
        return self._uniform_expr(s.test, self.uniform)

    def _uniform_loop(self, s) -> bool:
        if isinstance(s, ast.For):
            return (isinstance(s.target, ast.Name) and s.target.id in self.uniform
                    and self._uniform_range(s.iter, self.uniform) and not self._lane_exit(s.body))
        return self._uniform_expr(s.test, self.uniform) and not self._lane_exit(s.body)

    def _lane_exit(self, body) -> bool:
        return self._scan(body, True, self.uniform, set())

    # -- emitting ---------------------------------------------------------------------------
    def rename(self, node, k):
        node = copy.deepcopy(node)
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id in self.per_lane:
                n.id = lane_name(n.id, k)
        return node

    def function(self):
        f = self.fdef
        f.name = "_eagle_body_lanes"
        f.args.args[0] = ast.arg(I0)
        init = []
        for k in range(self.lanes):
            init.append(parse(f"{lane_name(self.idx, k)} = {I0} + {k}").body[0])
        for a in self.args:                              # a parameter the body reassigns per lane
            if a in self.per_lane:
                for k in range(self.lanes):
                    init.append(parse(f"{lane_name(a, k)} = {a}").body[0])
        f.body = init + self.block(f.body) or [ast.Pass()]
        return ast.fix_missing_locations(f)

    def block(self, body):
        out = []
        for s in body:
            out += self.statement(s)
        return out

    def _body(self, stmts):
        return stmts or [ast.Pass()]

    def statement(self, s):
        """One statement at uniform control flow, for all lanes."""
        L = range(self.lanes)
        if isinstance(s, (ast.Pass, ast.Break, ast.Continue)):
            return [s]                                   # exits here belong to a uniform loop
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
            return []                                    # a docstring
        if self._is_uniform_stmt(s):
            return [s]
        if isinstance(s, ast.If) and self._uniform_if(s):
            return [ast.If(s.test, self._body(self.block(s.body)), self.block(s.orelse))]
        if isinstance(s, ast.For) and self._uniform_loop(s):
            return [ast.For(s.target, s.iter, self._body(self.block(s.body)), self.block(s.orelse),
                            None)]
        if isinstance(s, ast.While):
            if self._uniform_loop(s):
                return [ast.While(s.test, self._body(self.block(s.body)), self.block(s.orelse))]
            return self.masked_while(s)
        # straight-line statements, per-lane ifs and per-lane for loops: one copy per lane
        return [self.rename(s, k) for k in L]

    def masked_while(self, s):
        """``while`` on per-sample values: lanes in lockstep, each with its active flag."""
        self._loops += 1
        flag = [f"_eagle_a{self._loops}__eagle_l{k}" for k in range(self.lanes)]
        out = [parse(f"{flag[k]} = True").body[0] for k in range(self.lanes)]
        exits = any(True for _ in _own_exits(s.body))
        inner = []
        for k in range(self.lanes):
            body = self._flat(self.rename(ast.Module(s.body, []), k).body, flag[k])
            if exits:
                body = [ast.For(ast.Name("_eagle_once", ast.Store()),
                                parse("range(1)", mode="eval").body, body, [], None)]
            stop = [parse(f"{flag[k]} = False").body[0]] + self.rename(ast.Module(s.orelse, []), k).body
            test = self.rename(s.test, k)
            inner.append(ast.If(ast.Name(flag[k], ast.Load()), [ast.If(test, body, stop)], []))
        cond = ast.BoolOp(ast.Or(), [ast.Name(f, ast.Load()) for f in flag]) if self.lanes > 1 else \
            ast.Name(flag[0], ast.Load())
        out.append(ast.While(cond, inner, []))
        return out

    def _exit_to_flag(self, s, flag):
        """In one lane's body of a masked loop: ``break`` clears the lane's flag and leaves this
        iteration, ``continue`` leaves this iteration (both through the one-pass wrapper)."""
        if isinstance(s, ast.Break):
            return [parse(f"{flag} = False").body[0], ast.Break()]
        if isinstance(s, ast.Continue):
            return ast.Break()
        if isinstance(s, ast.If):
            s.body = self._flat(s.body, flag)
            s.orelse = self._flat(s.orelse, flag)
        elif isinstance(s, (ast.For, ast.While)):
            s.orelse = self._flat(s.orelse, flag)
        return s

    def _flat(self, body, flag):
        out = []
        for b in body:
            r = self._exit_to_flag(b, flag)
            out += r if isinstance(r, list) else [r]
        return out
