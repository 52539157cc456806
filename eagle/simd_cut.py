"""The analysis of the vectorised host loop (``eagle.simd``): the body cut into loops over a tile.

``TileCut`` reads the (rewritten) body with ``eagle.analysis.Uniformity``, computes the
loop-invariant values of hoisted loops once per sample (LICM), cuts the body into items --
*segments* of per-sample statements, uniform statements, uniform ``if``s, hoisted loops and masked
loops -- finds the *state* (per-sample locals that live from one loop over the tile to another)
and the per-sample arrays, and writes the *witness* that gives the state its types.
``eagle.simd_emit`` writes the vectorised function from it.
"""
from __future__ import annotations

import ast
import copy

from .analysis import Refused, Uniformity, parents as parents_of, stores, strip_bare_return
from .bounds import ERR, LX
from .codegen import CO, PO, body_function
from .syntax import literal_trips, parse

SMALL_LOOP = 16                         # a literal range this short stays inside its segment


# --- analysis helpers ----------------------------------------------------------------------------

def _reads(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def names_in(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _plain_targets(t) -> set:
    """Names a target binds for sure (a name, or names in a tuple)."""
    if isinstance(t, ast.Name):
        return {t.id}
    if isinstance(t, (ast.Tuple, ast.List)):
        out = set()
        for e in t.elts:
            out |= _plain_targets(e.value if isinstance(e, ast.Starred) else e)
        return out
    return set()


def _exposed(stmts, defined, out) -> set:
    """Add to ``out`` the names read in ``stmts`` where they may not yet be assigned in ``stmts``
    (starting with ``defined``); return the names assigned on every path.  Conservative."""
    D = set(defined)
    for s in stmts:
        if isinstance(s, ast.Assign):
            out |= _reads(s.value) - D
            for t in s.targets:
                out |= _reads(t) - D
            for t in s.targets:
                D |= _plain_targets(t)
        elif isinstance(s, ast.AugAssign):
            out |= (_reads(s.value) | _reads(s.target) | _plain_targets(s.target)) - D
        elif isinstance(s, ast.AnnAssign):
            if s.value is not None:
                out |= _reads(s.value) - D
                out |= _reads(s.target) - D
                D |= _plain_targets(s.target)
        elif isinstance(s, ast.If):
            out |= _reads(s.test) - D
            D = _exposed(s.body, D, out) & _exposed(s.orelse, D, out)
        elif isinstance(s, ast.For):
            out |= _reads(s.iter) - D
            inner = D | _plain_targets(s.target)
            _exposed(s.body, inner, out)
            _exposed(s.orelse, inner, out)
        elif isinstance(s, ast.While):
            out |= _reads(s.test) - D
            _exposed(s.body, D, out)
            _exposed(s.orelse, D, out)
        else:
            out |= _reads(s) - D
    return D


def stmt(text: str):
    return parse(text).body[0]


def expr(text: str):
    return parse(text, mode="eval").body



# --- the cut ----------------------------------------------------------------------------------

class Segment:
    """A run of per-sample statements: one loop over the tile."""

    def __init__(self):
        self.stmts = []


class TileCut:
    """The body of one kernel cut for the vectorised loop: ``items`` (segments, uniform
    statements, ``if``s, hoisted and masked loops), the ``state`` kept in tile arrays, the
    per-sample ``arrays``, and the ``witness`` that types the state."""

    def __init__(self, plugin, opts):
        self.plugin, self.opts = plugin, opts
        fdef = parse(body_function(plugin)).body[0]
        strip_bare_return(fdef)
        self.fdef = fdef
        self._analyse()
        self.hoisted = self._licm()
        if self.hoisted:
            self._analyse()                                 # the hoisted values are locals too
        self.items = self._build(fdef.body)
        self._state()
        self._check_state()

    def _analyse(self):
        self.u = u = Uniformity(self.plugin, copy.deepcopy(self.fdef))   # refuses what the lanes refuse
        self.idx = u.idx
        self.args = [a for a in u.args if a not in (ERR, PO, CO)]
        self.planes, self.cells = u.planes, set(self.plugin.cells)
        clash = (self.planes | self.cells) & u.local
        if clash:
            raise Refused(f"the body rebinds {sorted(clash)[0]!r}, which the vectorised loop does not handle")
        self.uniform = u.uniform
        self.per_lane = u.per_sample - {self.idx}

    # -- loop-invariant per-sample values, computed once before their hoisted loop -----------------
    def _licm(self) -> int:
        """In a hoisted loop whose body is per-sample code, a subexpression of +, -, *, / on values
        the loop does not assign (``dt * w * w`` in ``vi - dt * w * w * xi``: Python's left-to-right
        grouping makes it a subtree) is computed once per sample before the loop, into a new local:
        the same operations on the same values, so the same bits.  Returns how many."""
        count = 0

        def visit(block):
            nonlocal count
            out = []
            for s in block:
                if isinstance(s, (ast.If, ast.For, ast.While)):
                    s.body = visit(s.body)
                    s.orelse = visit(s.orelse)
                if (isinstance(s, ast.For) and self._kind(s) == "loop" and s.body
                        and all(self._kind(b) == "sample" for b in s.body)):
                    fixed = stores(s) | self.planes | self.cells
                    found = []
                    for b in s.body:
                        _Invariant(self, fixed, found).visit(b)
                    for name, expr in found:
                        out.append(ast.Assign([ast.Name(name, ast.Store())], expr))
                    count += len(found)
                out.append(s)
            return out

        self.hoist_count = 0
        self.fdef.body = visit(self.fdef.body)
        ast.fix_missing_locations(self.fdef)
        return count

    # -- cutting the body into items ------------------------------------------------------------
    def _kind(self, s):
        u = self.u
        if isinstance(s, (ast.Pass, ast.Break, ast.Continue)):
            return "uniform"
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
            return "skip"                                       # a docstring
        if u.statement(s):
            return "uniform"
        if isinstance(s, ast.If) and u.branch(s):
            return "if" if self._structured(s.body + s.orelse) else "sample"
        if isinstance(s, (ast.For, ast.While)) and u.loop(s):
            if isinstance(s, ast.For):
                trips = literal_trips(s.iter)
                if trips is not None and trips <= SMALL_LOOP and not s.orelse and \
                        not self._structured(s.body):
                    return "sample"
            return "loop"
        if isinstance(s, ast.While):
            return "mwhile"
        return "sample"

    def _structured(self, body) -> bool:
        """Whether ``body`` holds anything but per-sample statements (then it is not sample code)."""
        for s in body:
            k = self._kind(s)
            if k in ("uniform", "loop", "mwhile", "if"):
                if k == "uniform" and isinstance(s, ast.Pass):
                    continue
                return True
        return False

    def _build(self, body):
        items = []
        for s in body:
            k = self._kind(s)
            if k == "skip":
                continue
            if k == "sample":
                if not items or not isinstance(items[-1], Segment):
                    items.append(Segment())
                items[-1].stmts.append(s)
            elif k == "uniform":
                items.append(("uniform", s))
            elif k == "if":
                items.append(("if", s, self._build(s.body), self._build(s.orelse)))
            elif k == "loop":
                items.append(("loop", s, self._build(s.body), self._build(s.orelse)))
            else:
                items.append(("mwhile", s))
        return items

    def walk_items(self, items):
        for it in items:
            yield it
            if isinstance(it, tuple) and it[0] in ("if", "loop"):
                yield from self.walk_items(it[2])
                yield from self.walk_items(it[3])

    # -- state: per-sample locals that live from one loop over the tile to another ---------------
    def _state(self):
        exposed = {}
        for it in self.walk_items(self.items):
            if isinstance(it, Segment) or it[0] == "mwhile":
                out = set()
                if isinstance(it, Segment):
                    _exposed(it.stmts, set(), out)
                else:
                    s = it[1]
                    _exposed([ast.Expr(s.test)] + s.body, set(), out)
                    _exposed(s.orelse, set(), out)
                exposed[id(it)] = out & self.per_lane
        self.state = sorted(set().union(*exposed.values())) if exposed else []
        self.lane_args = [a for a in self.args if a in self.state]   # reassigned Params: start as given
        self.exposed = exposed

    def _check_state(self):
        """A state local must be a number, or a per-sample array made once, at uniform control, by
        ``np.empty/zeros/ones(size)`` (size a number or Params) and used only as ``buf[k]``: that
        one lives in a ``(size, tile)`` array, the sample's own column its view.  Else: refused."""
        state = set(self.state)
        np_names = {g["name"] for g in self.plugin.frozen if g["kind"] == "module" and g["module"] == "numpy"}
        parents = parents_of(self.fdef)
        top = {id(st) for it in self.walk_items(self.items) if isinstance(it, Segment) for st in it.stmts}
        self.arrays = {}
        for node in ast.walk(self.fdef):
            if not (isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call)):
                continue
            f = node.value.func
            if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in np_names):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            hit = set().union(*(_plain_targets(t) for t in targets)) & state
            if not hit:
                continue
            name = sorted(hit)[0]
            spec = self._array_spec(node, name, f, np_names, parents, top)
            if spec is None:
                raise Refused(f"the per-sample array {name!r} lives across a loop over the tile, which the "
                              "vectorised loop handles only when it is made once by np.empty/zeros/ones(size) "
                              "and used as {name}[k]".replace("{name}", name))
            self.arrays[name] = spec
        self.state = [v for v in self.state if v not in self.arrays]

    def _array_spec(self, node, name, f, np_names, parents, top):
        """``(size source, dtype source, fill source or None)`` of a per-sample array, or None."""
        call = node.value
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and id(node) in top and f.attr in ("empty", "zeros", "ones") and 1 <= len(call.args) <= 2):
            return None
        size = call.args[0]
        dtype = call.args[1] if len(call.args) == 2 else None
        for kw in call.keywords:
            if kw.arg != "dtype" or dtype is not None:
                return None
            dtype = kw.value
        if not self.u.expr(size, set()):
            return None
        if dtype is not None and not (isinstance(dtype, ast.Attribute) and isinstance(dtype.value, ast.Name)
                                      and dtype.value.id in np_names):
            return None
        binds = [n for n in ast.walk(self.fdef) if isinstance(n, ast.Name) and n.id == name]
        for n in binds:
            if isinstance(n.ctx, ast.Store):
                if parents.get(n) is not node:
                    return None                              # bound twice
            elif not (isinstance(parents.get(n), ast.Subscript) and parents[n].value is n) and not _checked_by(
                    n, parents):
                return None                                  # used other than as buf[k]
        fill = {"empty": None, "zeros": "0", "ones": "1"}[f.attr]
        return (ast.unparse(size), ast.unparse(dtype) if dtype is not None else "_eagle_np.float64", fill)

    # -- the witness: the one-at-a-time body with the state captured where it is read --------------
    def witness(self):
        before, at_body = {}, {}
        self.captures = {v: [] for v in self.state}
        count = 0

        def capture(names):
            nonlocal count
            out = []
            for v in sorted(names):
                name = f"_eagle_w{count}"
                self.captures[v].append(count)
                out.append(stmt(f"{name} = {v}"))
                count += 1
            return out

        for it in self.walk_items(self.items):
            ex = self.exposed.get(id(it), set()) & set(self.state)
            if ex:
                if isinstance(it, Segment):
                    before.setdefault(id(it.stmts[0]), []).extend(capture(ex))
                else:
                    at_body.setdefault(id(it[1]), []).extend(capture(ex))

        def block(stmts):
            out = []
            for s in stmts:
                out += before.get(id(s), [])
                s2 = copy.copy(s)
                if isinstance(s, (ast.If, ast.For, ast.While)):
                    s2.body = at_body.get(id(s), []) + block(s.body)
                    s2.orelse = block(s.orelse)
                out.append(s2)
            return out

        f = copy.copy(self.fdef)
        f.name = "_eagle_witness"
        f.body = [stmt("_eagle_simd_rt.noinline()")] + block(self.fdef.body)
        if count:
            f.body.append(stmt(f"return ({', '.join(f'_eagle_w{k}' for k in range(count))},)"))
        self.n_captures = count
        return ast.unparse(ast.fix_missing_locations(f)) if count else ""


_PURE_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div)


class _Invariant(ast.NodeTransformer):
    """Replaces the maximal loop-invariant per-sample subexpressions of a hoisted loop's body by new
    names (``_eagle_hK``), recording ``(name, expression)`` in ``found``."""

    def __init__(self, t, fixed, found):
        self.t, self.fixed, self.found = t, fixed, found

    def _pure(self, e) -> bool:
        if isinstance(e, ast.Constant):
            return isinstance(e.value, (int, float)) and not isinstance(e.value, bool)
        if isinstance(e, ast.Name):
            t = self.t
            return e.id not in self.fixed and (e.id in t.per_lane or e.id == t.idx or e.id in t.uniform
                                               or e.id in t.u.params or e.id in t.u.consts)
        if isinstance(e, ast.BinOp):
            return isinstance(e.op, _PURE_OPS) and self._pure(e.left) and self._pure(e.right)
        if isinstance(e, ast.UnaryOp):
            return isinstance(e.op, ast.USub) and self._pure(e.operand)
        return False

    def _per_sample(self, e) -> bool:
        return any(isinstance(n, ast.Name) and (n.id in self.t.per_lane or n.id == self.t.idx)
                   for n in ast.walk(e))

    def visit(self, node):
        if (isinstance(node, (ast.BinOp, ast.UnaryOp)) and self._pure(node) and self._per_sample(node)):
            self.t.hoist_count += 1
            name = f"_eagle_h{self.t.hoist_count}"
            self.found.append((name, node))
            return ast.Name(name, ast.Load())
        return super().visit(node)



__all__ = ["SMALL_LOOP", "Segment", "TileCut", "expr", "names_in", "stmt"]


def _checked_by(n, parents) -> bool:
    """Whether the name ``n`` is the array of its own index check, ``buf[_eagle_lx(buf, k, ...)]``."""
    call = parents.get(n)
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == LX
            and call.args[:1] == [n])
