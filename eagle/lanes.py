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
body numba does not compile falls back too (``eagle.host_path``).

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

from .analysis import Refused, Uniformity, exits_to_flag, fallback_reason, own_exits
from .codegen import body_function
from .rows import ROW
from .syntax import parse

ENV = "EAGLE_HOST_LANES"
ALLOWED = tuple(k for k in (1, 2, 4, 8, 16) if ROW % k == 0)   # a lane group never straddles a row
DEFAULT, SMALL = 8, 4
BIG_BODY = 400          # AST nodes: a bigger body runs SMALL lanes (compile time, code size)
LOOP_STATE = 2          # per-lane names a loop may carry at DEFAULT lanes; more run SMALL lanes
#                         (16 vector registers: 8 lanes x 3 chains spill, and a spill lengthens a chain)
I0 = "_eagle_i0"

__all__ = ["ENV", "ALLOWED", "DEFAULT", "SMALL", "Refused", "choose", "env_lanes", "lane_name",
           "lanes_function"]


def lane_name(name: str, k: int) -> str:
    return f"{name}__eagle_l{k}"


def env_lanes():
    """``EAGLE_HOST_LANES`` as a lane count, or None."""
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


def choose(plugin, want=None):
    """``(lanes, reason)`` for the plugin's host entry: ``lanes == 1`` with the reason when it
    runs one sample at a time, else ``reason`` is None.  ``want`` (or ``EAGLE_HOST_LANES``)
    forces the count."""
    if want is None:
        want = env_lanes()
    elif want not in ALLOWED:
        raise ValueError(f"host lanes={want!r}: one of {', '.join(map(str, ALLOWED))}")
    if want == 1:
        return 1, f"one sample at a time was asked for ({ENV}=1)"
    reason = fallback_reason(plugin)
    if reason:
        return 1, reason
    fdef = parse(body_function(plugin)).body[0]
    try:
        t = LaneTransform(plugin, fdef, DEFAULT)
        lanes = want or t.preferred()
        t.function()
    except Refused as e:
        return 1, str(e)
    return lanes, None


def lanes_function(plugin, lanes: int) -> str:
    """Source of ``_eagle_body_lanes(_eagle_i0, *args, _eagle_po, _eagle_co)``."""
    fdef = parse(body_function(plugin)).body[0]
    return ast.unparse(LaneTransform(plugin, fdef, lanes).function())


# --- the transform ----------------------------------------------------------------------------

class LaneTransform:
    """The laned body of one kernel: ``function()`` rewrites ``fdef`` (in place) for ``lanes``
    lanes, with the analysis of ``eagle.analysis.Uniformity``."""

    def __init__(self, plugin, fdef, lanes):
        self.lanes = lanes
        self.fdef = fdef
        self.u = Uniformity(plugin, fdef)
        self.idx, self.args = self.u.idx, self.u.args
        self.per_lane = self.u.per_sample
        self._loops = 0

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
        if self.u.statement(s):
            return [s]
        if isinstance(s, ast.If) and self.u.branch(s):
            return [ast.If(s.test, self._body(self.block(s.body)), self.block(s.orelse))]
        if isinstance(s, ast.For) and self.u.loop(s):
            return [ast.For(s.target, s.iter, self._body(self.block(s.body)), self.block(s.orelse),
                            None)]
        if isinstance(s, ast.While):
            if self.u.loop(s):
                return [ast.While(s.test, self._body(self.block(s.body)), self.block(s.orelse))]
            return self.masked_while(s)
        # straight-line statements, per-lane ifs and per-lane for loops: one copy per lane
        return [self.rename(s, k) for k in L]

    def masked_while(self, s):
        """``while`` on per-sample values: lanes in lockstep, each with its active flag."""
        self._loops += 1
        flag = [f"_eagle_a{self._loops}__eagle_l{k}" for k in range(self.lanes)]
        out = [parse(f"{flag[k]} = True").body[0] for k in range(self.lanes)]
        exits = any(True for _ in own_exits(s.body))
        inner = []
        for k in range(self.lanes):
            body = exits_to_flag(self.rename(ast.Module(s.body, []), k).body, flag[k])
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
