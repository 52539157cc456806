"""The emission of the vectorised host loop (``eagle.simd``): ``_eagle_simd(b, n, ...)``.

``TileEmitter`` extends the analysis (``eagle.simd_cut.TileCut``) with the writing: each segment
a loop over the tile's samples (``for s in range(n)``, the sample's planes read through views of
the tile, its state loaded from and stored to tile arrays), a hoisted ``for`` whose body is one
segment unrolled, a masked loop as lockstep rounds with an active flag per sample.
"""
from __future__ import annotations

import ast
import copy
from typing import NamedTuple

from .analysis import exits_to_flag, own_exits, stores as bound_in
from .bounds import ERR
from .codegen import CO, PO
from .rows import IDENTITY, float_literal
from .simd_cut import Segment, TileCut, expr, names_in, stmt
from .syntax import literal_trips
from .syntax import parse

S, B, N = "_eagle_s", "_eagle_b", "_eagle_n"
#: the generated code calls these builtins by names no Param can shadow
RANGE, LEN, MIN = "_eagle_srange", "_eagle_slen", "_eagle_smin"
ALIASES = f"{RANGE}, {LEN}, {MIN} = range, len, min"
FLAT_TILE = 2048                        # a body with no state: tiles only bound the cell buffers


class Built(NamedTuple):
    """What the host module needs from the transform."""
    witness: str         # ``_eagle_witness``: the body with its state captured ("" without state)
    function: str        # ``_eagle_simd(b, n, *args, po, co, *slots, *flags)``
    tile: int            # samples per tile
    vector: int          # the vector width asked of LLVM (bits)
    slots: list          # (local, capture indices) for each state local, in call order
    flags: list          # names of the masked loops' active-flag arrays
    arrays: list         # (local, size source, dtype source) for each per-sample array


class TileEmitter(TileCut):
    """``built(wide)``: the vectorised function of one kernel; ``wide`` whether the CPU has
    512-bit vectors (then a body without masked loops asks for them)."""

    def __init__(self, plugin, opts):
        super().__init__(plugin, opts)
        self._loops = 0
        self.views = set()

    def built(self, wide: bool) -> Built:
        witness = self.witness()
        self.tile = self.opts.tile if (self.state or self.arrays or self._has_loops()) else FLAT_TILE
        masked = any(isinstance(it, tuple) and it[0] == "mwhile" for it in self.walk_items(self.items))
        self.vector = self.opts.vector or (512 if wide and not masked else 256)
        flags = []
        body = self._emit(self.items, flags)
        pre = [stmt("_eagle_simd_rt.noinline()")]
        pre += [stmt("_eagle_simd_rt.wide()")] if self.vector == 512 else []
        pre += [stmt(f"{v}__eagle_v = {v}[{B} - {PO}:]") for v in sorted(self.views)]
        init = []
        for c, op in self.plugin.cells.items():
            init.append(stmt(f"{c}[{S}] = {float_literal(IDENTITY[op])}"))
        for a in self.lane_args:
            init.append(stmt(f"{a}__eagle_t[{S}] = {a}"))
        if init:
            pre.append(self._loop(init))
        slots = [f"{v}__eagle_t" for v in self.state] + [f"{v}__eagle_A" for v in sorted(self.arrays)]
        params = [B, N, *self.args, ERR, PO, CO, *slots, *flags]
        f = parse(f"def _eagle_simd({', '.join(params)}):\n    pass").body[0]
        f.body = pre + body or [ast.Pass()]
        return Built(witness=witness, function=ast.unparse(ast.fix_missing_locations(f)), tile=self.tile,
                     vector=self.vector,
                     slots=[(v, self.captures[v]) for v in self.state], flags=flags,
                     arrays=[(v, *self.arrays[v][:2]) for v in sorted(self.arrays)])

    def _has_loops(self):
        return any(isinstance(it, tuple) and it[0] in ("loop", "mwhile") for it in self.walk_items(self.items))

    def _emit(self, items, flags):
        out = []
        for it in items:
            if isinstance(it, Segment):
                out.append(self._segment(it.stmts))
            elif it[0] == "uniform":
                out.append(copy.deepcopy(it[1]))
            elif it[0] == "if":
                s = it[1]
                out.append(ast.If(copy.deepcopy(s.test), self._emit(it[2], flags) or [ast.Pass()],
                                  self._emit(it[3], flags)))
            elif it[0] == "loop":
                out += self._hoisted(it, flags)
            else:
                out += self._masked(it[1], flags)
        return out

    # sample loops
    def _rewrite(self, stmts):
        out = []
        for st in stmts:
            if (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
                    and st.targets[0].id in self.arrays):
                fill = self.arrays[st.targets[0].id][2]      # the array is its column's view (_head)
                if fill is not None:
                    out.append(stmt(f"{st.targets[0].id}[:] = {fill}"))
                continue
            out.append(copy.deepcopy(st))
        r = _Index(self.idx, self.planes, self.cells)
        out = [r.visit(st) for st in out]
        self.views |= r.views
        return out

    def _loop(self, body):
        return ast.For(ast.Name(S, ast.Store()), expr(f"{RANGE}({N})"), body, [], None)

    def _head(self, names):
        """The first lines of a sample's iteration: its index and its state."""
        out = [stmt(f"{self.idx} = {B} + {S}")]
        out += [stmt(f"{v} = {v}__eagle_t[{S}]") for v in sorted(names & set(self.state))]
        out += [stmt(f"{v} = {v}__eagle_A[:, {S}]") for v in sorted(names & set(self.arrays))]
        return out

    def _tail(self, names):
        return [stmt(f"{v}__eagle_t[{S}] = {v}") for v in sorted(names & set(self.state))]

    def _segment(self, stmts):
        region = ast.Module(stmts, [])
        return self._loop(self._head(names_in(region)) + self._rewrite(stmts) + self._tail(bound_in(region)))

    # hoisted loops
    def _hoisted(self, it, flags):
        s, body, orelse = it[1], it[2], it[3]
        if (isinstance(s, ast.For) and self.opts.unroll > 1 and len(body) == 1 and isinstance(body[0], Segment)
                and not orelse and isinstance(s.target, ast.Name) and literal_trips(s.iter) is None
                and not self._used_after(s)):
            return self._unrolled(s, body[0].stmts)
        inner = self._emit(body, flags) or [ast.Pass()]
        tail = self._emit(orelse, flags)
        if isinstance(s, ast.For):
            return [ast.For(copy.deepcopy(s.target), copy.deepcopy(s.iter), inner, tail, None)]
        return [ast.While(copy.deepcopy(s.test), inner, tail)]

    def _used_after(self, loop) -> bool:
        """Whether a loop's target is read outside the loop (then it is not unrolled)."""
        name = loop.target.id
        inside = {id(n) for n in ast.walk(loop)}
        return any(isinstance(n, ast.Name) and n.id == name and id(n) not in inside for n in ast.walk(self.fdef))

    def _unrolled(self, s, stmts):
        self._loops += 1
        k, U = self._loops, self.opts.unroll
        t = s.target.id
        args = s.iter.args
        lo, hi, st = (("0", ast.unparse(args[0]), "1") if len(args) == 1 else
                      (ast.unparse(args[0]), ast.unparse(args[1]), ast.unparse(args[2]) if len(args) == 3 else "1"))
        q, m = f"_eagle_u{k}", f"_eagle_m{k}"
        lo_n, st_n = f"_eagle_lo{k}", f"_eagle_st{k}"
        reads_t = t in names_in(ast.Module(stmts, []))
        region = ast.Module(stmts, [])
        names, stores = names_in(region), bound_in(region)

        def copies(count, offset):
            body = []
            for u in range(count):
                if reads_t:
                    body.append(stmt(f"{t} = {lo_n} + ({q} + {u}) * {st_n}" if offset else
                                      f"{t} = {lo_n} + {q} * {st_n}"))
                body += self._rewrite(stmts)
            return self._loop(self._head(names) + body + self._tail(stores))

        out = [stmt(f"{lo_n} = {lo}"), stmt(f"{m} = {LEN}({RANGE}({lo_n}, {hi}, {st}))"),
               stmt(f"{st_n} = {st}"), stmt(f"{q} = 0")]
        out.append(ast.While(expr(f"{q} + {U} <= {m}"), [copies(U, True), stmt(f"{q} += {U}")], []))
        out.append(ast.While(expr(f"{q} < {m}"), [copies(1, False), stmt(f"{q} += 1")], []))
        return out

    # masked loops
    def _masked(self, s, flags):
        self._loops += 1
        k = self._loops
        flag = f"_eagle_a{k}"
        arr = f"{flag}__eagle_f"
        flags.append(arr)
        left = f"_eagle_left{k}"
        region = ast.Module([ast.Expr(s.test)] + s.body + s.orelse, [])
        names, stores = names_in(region), bound_in(region)
        body = self._rewrite(s.body)
        if any(True for _ in own_exits(s.body)):
            body = exits_to_flag(body, flag)
            body = [ast.For(ast.Name("_eagle_once", ast.Store()), expr(f"{RANGE}(1)"), body, [], None)]
        stop = [stmt(f"{flag} = False")] + self._rewrite(s.orelse)
        test = self._rewrite([ast.Expr(s.test)])[0].value
        step = (self._head(names) + [stmt(f"{flag} = {arr}[{S}]"),
                                     ast.If(ast.Name(flag, ast.Load()), [ast.If(test, body, stop)], [])]
                + self._tail(stores) + [stmt(f"{arr}[{S}] = {flag}"), stmt(f"{left} += {flag}")])
        return [self._loop([stmt(f"{arr}[{S}] = True")]),
                ast.While(ast.Constant(True), [stmt(f"{left} = 0"), self._loop(step),
                                               ast.If(expr(f"{left} == 0"), [ast.Break()], [])], [])]



class _Index(ast.NodeTransformer):
    """``plane[i - po]`` -> ``plane_view[s]``, ``cell[i - co]`` -> ``cell[s]`` (the tile's buffer)."""

    def __init__(self, idx, planes, cells):
        self.idx, self.planes, self.cells = idx, planes, cells
        self.views = set()

    def _own(self, e, off):
        return (isinstance(e, ast.BinOp) and isinstance(e.op, ast.Sub) and isinstance(e.left, ast.Name)
                and e.left.id == self.idx and isinstance(e.right, ast.Name) and e.right.id == off)

    def visit_Subscript(self, node):
        self.generic_visit(node)
        if not isinstance(node.value, ast.Name):
            return node
        name = node.value.id
        off = CO if name in self.cells else PO if name in self.planes else None
        if off is None:
            return node
        sl = node.slice
        first = sl.elts[0] if isinstance(sl, ast.Tuple) and sl.elts else sl
        if not self._own(first, off):
            return node
        s = ast.Name(S, ast.Load())
        if isinstance(sl, ast.Tuple):
            sl.elts[0] = s
        else:
            node.slice = s
        if off == PO:
            node.value = ast.Name(f"{name}__eagle_v", node.value.ctx)
            self.views.add(name)
        return node



__all__ = ["ALIASES", "RANGE", "LEN", "MIN", "Built", "TileEmitter"]
