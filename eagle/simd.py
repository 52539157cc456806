"""Host SIMD: the body rewritten tile-major, so that LLVM vectorises it across samples, same bits.

The laned body (``eagle.lanes``) interleaves a few samples as scalar code.  This transform runs a
*tile* of contiguous samples (``Options.tile``, 128 by default) instead, statement group by
statement group, each group as a loop over the tile's samples that LLVM's loop vectoriser turns
into packed instructions (``vmulpd``/``vaddpd`` on ``ymm``/``zmm`` registers).  Packed arithmetic
is element-wise: every sample performs exactly its own operations in its own order, so the bits
are those of one sample at a time.  No fastmath, no FMA contraction (unless
``@eagle.kernel(fma=True)``, which contracts alike in every body), no vector math library
(``NUMBA_DISABLE_INTEL_SVML``; this path is refused while numba uses SVML).

The (already rewritten, ``codegen.body_function``) body is cut, at uniform control flow (see
``eagle.lanes`` for what is uniform), into:

* *segments*: runs of per-sample statements (assignments, per-sample ``if``, per-sample ``for``,
  calls), each emitted as ``for s in range(n): ...`` with the sample's index ``i = b + s`` and its
  planes read through views of the tile (``x[i - po]`` becomes ``x_view[s]``);
* *uniform statements*, run once per tile; a uniform ``if`` stays one ``if`` around its parts;
* *hoisted loops*: a loop with a uniform header and no per-sample exit (``for _ in range(steps)``)
  runs outside, each of its iterations running its segments over the tile.  A hoisted ``for``
  whose body is one segment is unrolled ``Options.unroll`` times inside the sample loop, so the
  state stays in registers between steps (a loop over a small literal range stays inside its
  segment, where LLVM unrolls it);
* *masked loops*: a ``while`` on per-sample values runs in lockstep rounds over the tile; each
  sample has an active flag, runs its own test and body while active (``break`` clears the flag,
  ``continue`` ends its round, ``else`` runs when its test fails), and the rounds end when no
  sample is active.  A sample's loads and stores are unconditional, so the round vectorises with
  selects (or masked stores for planes and cells); side effects are never reordered within a sample.

A per-sample local that lives from one segment to another (``state``) is kept in a tile array
(one element per sample).  Its dtype is the type numba gives that local at each place it is read
in the one-at-a-time body: a *witness* -- the body with those values captured, never run, only
typed -- supplies it, so an ``int`` accumulator that becomes a ``float`` at a loop's head is
stored as numba would cast it there; a local whose type differs between two such places falls
back (``same_type``).  Cells are written into a tile buffer and folded row by row by
``eagle.rows.row_loop_lines`` exactly as before.

512-bit vectors: LLVM prefers 256-bit vectors on CPUs that have AVX-512 ("prefer-256-bit"); the
generated functions ask for 512 through their own LLVM function attribute (``wide``), so nothing
changes for any other numba code in the process.

``choose`` says whether a plugin takes this path, or why not: kernels that write other samples
(sample order), raise (the loop records the sample it is at), use a construct the lane transform
refuses, or keep a per-sample array across a hoisted loop fall back to the laned loop, as does a
body whose vectorised loop does not compile (``eagle.host.HostEntry``).  ``EAGLE_HOST_SIMD=0``
turns the path off; ``EAGLE_HOST_LANES`` (a forced lane count) does too.
"""
from __future__ import annotations

import ast
import copy
import os
from typing import NamedTuple

from numba import types
from numba.core.errors import RequireLiteralValue, TypingError
from numba.extending import intrinsic

from .syntax import parse
from .bounds import ERR
from .codegen import PO, CO, body_function
from .lanes import ENV as LANES_ENV, Refused, _Lanes, _fallback_reason, _own_exits, _stores
from .rows import IDENTITY, ROW, float_literal

ENV = "EAGLE_HOST_SIMD"                 # 0: the laned loop; 1 (default): the vectorised loop
VECTOR_ENV = "EAGLE_HOST_VECTOR"        # 256 or 512: the vector width asked of LLVM
TILES = (32, 64, 128, 256, 512)         # tile widths: whole rows, so a tile never splits a row
TILE = 128
assert all(t % ROW == 0 for t in TILES + (TILE,))
FLAT_TILE = 2048                        # a body with no state: tiles only bound the cell buffers
UNROLL = 4
SMALL_LOOP = 16                         # a literal range this short stays inside its segment

S, B, N = "_eagle_s", "_eagle_b", "_eagle_n"
#: the generated code calls these builtins by names no Param can shadow
RANGE, LEN, MIN = "_eagle_srange", "_eagle_slen", "_eagle_smin"
ALIASES = f"{RANGE}, {LEN}, {MIN} = range, len, min"
MARK = "eagle:"                         # starts the message of a refusal raised while typing


class Options(NamedTuple):
    """How the vectorised loop is built: samples per tile, vector bits (0: eagle chooses), unroll
    of hoisted loops."""
    tile: int = TILE
    vector: int = 0
    unroll: int = UNROLL


def host_has_avx512() -> bool:
    import llvmlite.binding as ll
    try:
        return "+avx512f" in ll.get_host_cpu_features().flatten().split(",")
    except Exception:  # noqa: BLE001 - no feature list: assume the LLVM default width
        return False


def default_options() -> Options:
    """``EAGLE_HOST_VECTOR`` (256 or 512) forces the vector width; else eagle chooses per kernel:
    512 bits where the CPU has AVX-512, except for a body with a masked loop, whose rounds ran
    faster at 256 (benchmarks/simd.py)."""
    text = os.environ.get(VECTOR_ENV)
    if text:
        if text not in ("256", "512"):
            raise ValueError(f"{VECTOR_ENV}={text!r}: the vector width is 256 or 512 bits")
        return Options(vector=int(text))
    return Options()


def check_options(opts: Options) -> Options:
    if opts.tile not in TILES:
        raise ValueError(f"tile={opts.tile!r}: one of {', '.join(map(str, TILES))} samples")
    if opts.vector not in (0, 256, 512):
        raise ValueError(f"vector={opts.vector!r}: 256 or 512 bits (0: eagle chooses)")
    if not (isinstance(opts.unroll, int) and 1 <= opts.unroll <= 16):
        raise ValueError(f"unroll={opts.unroll!r}: 1 to 16")
    return opts


def choose(plugin, lanes=None, want=None):
    """``(options, None)`` when the plugin's host entry runs the vectorised loop, else
    ``(None, reason)``.  ``lanes`` is a lane count asked for (then the laned loop runs);
    ``want``: None (eagle chooses, ``EAGLE_HOST_SIMD``), False (never) or ``Options``."""
    if want is False:
        return None, "the laned loop was asked for"
    if lanes is not None:
        return None, f"a lane count was asked for (lanes={lanes})"
    if want is None:
        env = os.environ.get(ENV, "1")
        if env not in ("0", "1"):
            raise ValueError(f"{ENV}={env!r}: 1 runs the vectorised host loop, 0 the laned one")
        if env == "0":
            return None, f"the vectorised loop is off ({ENV}=0)"
        if os.environ.get(LANES_ENV):
            return None, f"{LANES_ENV} forces the laned loop"
        want = default_options()
    opts = check_options(Options(*want))
    reason = _fallback_reason(plugin)
    if reason:
        return None, reason
    import numba
    if getattr(numba.config, "USING_SVML", False):
        return None, "numba uses Intel SVML, whose vector math gives position-dependent bits"
    try:
        _Simd(plugin, opts)
    except Refused as e:
        return None, str(e)
    return opts, None


class Built(NamedTuple):
    """What the host module needs from the transform."""
    witness: str         # ``_eagle_witness``: the body with its state captured ("" without state)
    function: str        # ``_eagle_simd(b, n, *args, po, co, *slots, *flags)``
    tile: int            # samples per tile
    vector: int          # the vector width asked of LLVM (bits)
    slots: list          # (local, capture indices) for each state local, in call order
    flags: list          # names of the masked loops' active-flag arrays
    arrays: list         # (local, size source, dtype source) for each per-sample array


def build(plugin, opts: Options) -> Built:
    return _Simd(plugin, check_options(opts)).built()


# --- runtime helpers, called from the generated code -------------------------------------------

@intrinsic
def wide(typingctx):
    """Ask LLVM for 512-bit vectors in the function that calls this (its own function attribute,
    "prefer-vector-width"; llvmlite's attribute set knows no string attributes, hence set.add)."""
    def codegen(context, builder, signature, args):
        set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()
    return types.none(), codegen


@intrinsic
def apart(typingctx):
    """Keep the function that calls this out of its callers (LLVM's noinline): the tile loop then
    does not optimise the vectorised loops a second time, which doubled the compile time."""
    def codegen(context, builder, signature, args):
        builder.function.attributes.add("noinline")
        return context.get_dummy_value()
    return types.none(), codegen


@intrinsic
def dtype_of(typingctx, a):
    """The numpy dtype of a number's numba type, for ``np.empty(n, dtype_of(x))`` (typing only)."""
    ty = types.unliteral(a)
    if not isinstance(ty, (types.Number, types.Boolean)):
        raise TypingError(f"{MARK} a per-sample local kept across a loop over the tile is a {ty}, not a number")

    def codegen(context, builder, signature, args):
        return context.get_dummy_value()
    return types.DType(ty)(a), codegen


@intrinsic
def same_type(typingctx, name, a, b):
    """A typing-time check: the local ``name`` has one type at every place its tile array is read."""
    if not isinstance(name, types.StringLiteral):
        raise RequireLiteralValue("name")
    ta, tb = types.unliteral(a), types.unliteral(b)
    if ta != tb:
        raise TypingError(f"{MARK} the local {name.literal_value!r} is {ta} in one loop over the tile "
                          f"and {tb} in another")

    def codegen(context, builder, signature, args):
        return context.get_dummy_value()
    return types.none(name, a, b), codegen


def refusal(error) -> str:
    """The reason a vectorised loop did not compile, from numba's error."""
    text = str(error)
    for line in text.splitlines():
        if MARK in line:
            return line[line.index(MARK) + len(MARK):].strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return f"the vectorised loop did not compile ({type(error).__name__}: {first[:160]})"


# --- analysis helpers ----------------------------------------------------------------------------

def _reads(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _names(node) -> set:
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


def _literal_range(it):
    """The trip count of ``range(<int literals>)``, or None."""
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"):
        return None
    vals = []
    for a in it.args:
        if isinstance(a, ast.UnaryOp) and isinstance(a.op, ast.USub) and isinstance(a.operand, ast.Constant):
            a = ast.Constant(-a.operand.value)
        if not (isinstance(a, ast.Constant) and type(a.value) is int):
            return None
        vals.append(a.value)
    try:
        return len(range(*vals))
    except (TypeError, ValueError):
        return None


def _stmt(text: str):
    return parse(text).body[0]


def _expr(text: str):
    return parse(text, mode="eval").body


# --- the transform ---------------------------------------------------------------------------

class _Seg:
    """A run of per-sample statements: one loop over the tile."""

    def __init__(self):
        self.stmts = []


class _Simd:
    def __init__(self, plugin, opts: Options):
        self.plugin, self.opts = plugin, opts
        fdef = parse(body_function(plugin)).body[0]
        if fdef.body and isinstance(fdef.body[-1], ast.Return) and fdef.body[-1].value is None:
            fdef.body.pop()
        self.fdef = fdef
        self._analyse()
        self.hoisted = self._licm()
        if self.hoisted:
            self._analyse()                                 # the hoisted values are locals too
        self.items = self._build(fdef.body)
        self._state()
        self._check_state()
        self._loops = 0
        self.views = set()

    def _analyse(self):
        self.lt = lt = _Lanes(self.plugin, copy.deepcopy(self.fdef), 1)   # refuses what the lanes refuse
        self.idx = lt.idx
        self.args = [a for a in lt.args if a not in (ERR, PO, CO)]
        self.planes, self.cells = lt.planes, set(self.plugin.cells)
        clash = (self.planes | self.cells) & lt.local
        if clash:
            raise Refused(f"the body rebinds {sorted(clash)[0]!r}, which the vectorised loop does not handle")
        self.uniform = lt.uniform
        self.per_lane = lt.per_lane - {self.idx}

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
                    fixed = _stores(s) | self.planes | self.cells
                    found = []
                    for b in s.body:
                        _Invariant(self, fixed, found).visit(b)
                    for name, expr in found:
                        out.append(ast.Assign([ast.Name(name, ast.Store())], expr))
                    count += len(found)
                out.append(s)
            return out

        self._hoist_count = 0
        self.fdef.body = visit(self.fdef.body)
        ast.fix_missing_locations(self.fdef)
        return count

    # -- cutting the body into items ------------------------------------------------------------
    def _kind(self, s):
        lt = self.lt
        if isinstance(s, (ast.Pass, ast.Break, ast.Continue)):
            return "uniform"
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
            return "skip"                                       # a docstring
        if lt._is_uniform_stmt(s):
            return "uniform"
        if isinstance(s, ast.If) and lt._uniform_if(s):
            return "if" if self._structured(s.body + s.orelse) else "sample"
        if isinstance(s, (ast.For, ast.While)) and lt._uniform_loop(s):
            if isinstance(s, ast.For):
                trips = _literal_range(s.iter)
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
                if not items or not isinstance(items[-1], _Seg):
                    items.append(_Seg())
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

    def _walk_items(self, items):
        for it in items:
            yield it
            if isinstance(it, tuple) and it[0] in ("if", "loop"):
                yield from self._walk_items(it[2])
                yield from self._walk_items(it[3])

    # -- state: per-sample locals that live from one loop over the tile to another ---------------
    @staticmethod
    def _region(it):
        """The statements one loop over the tile runs for an item (a segment or a masked loop)."""
        if isinstance(it, _Seg):
            return it.stmts
        s = it[1]
        return [ast.Expr(s.test)] + s.body + s.orelse

    def _state(self):
        exposed = {}
        for it in self._walk_items(self.items):
            if isinstance(it, _Seg) or it[0] == "mwhile":
                out = set()
                if isinstance(it, _Seg):
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
        parents = {}
        for node in ast.walk(self.fdef):
            for child in ast.iter_child_nodes(node):
                parents[child] = node
        top = {id(st) for it in self._walk_items(self.items) if isinstance(it, _Seg) for st in it.stmts}
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
        if not self.lt._uniform_expr(size, set()):
            return None
        if dtype is not None and not (isinstance(dtype, ast.Attribute) and isinstance(dtype.value, ast.Name)
                                      and dtype.value.id in np_names):
            return None
        binds = [n for n in ast.walk(self.fdef) if isinstance(n, ast.Name) and n.id == name]
        for n in binds:
            if isinstance(n.ctx, ast.Store):
                if parents.get(n) is not node:
                    return None                              # bound twice
            elif not (isinstance(parents.get(n), ast.Subscript) and parents[n].value is n):
                return None                                  # used other than as buf[k]
        fill = {"empty": None, "zeros": "0", "ones": "1"}[f.attr]
        return (ast.unparse(size), ast.unparse(dtype) if dtype is not None else "_eagle_np.float64", fill)

    # -- the witness: the one-at-a-time body with the state captured where it is read --------------
    def _witness(self):
        before, at_body = {}, {}
        self.captures = {v: [] for v in self.state}
        count = 0

        def capture(names):
            nonlocal count
            out = []
            for v in sorted(names):
                name = f"_eagle_w{count}"
                self.captures[v].append(count)
                out.append(_stmt(f"{name} = {v}"))
                count += 1
            return out

        for it in self._walk_items(self.items):
            ex = self.exposed.get(id(it), set()) & set(self.state)
            if ex:
                if isinstance(it, _Seg):
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
        f.body = [_stmt("_eagle_simd_rt.apart()")] + block(self.fdef.body)
        if count:
            f.body.append(_stmt(f"return ({', '.join(f'_eagle_w{k}' for k in range(count))},)"))
        self.n_captures = count
        return ast.unparse(ast.fix_missing_locations(f)) if count else ""

    # -- emitting the vectorised function ------------------------------------------------------
    def built(self) -> Built:
        witness = self._witness()
        self.tile = self.opts.tile if (self.state or self.arrays or self._has_loops()) else FLAT_TILE
        masked = any(isinstance(it, tuple) and it[0] == "mwhile" for it in self._walk_items(self.items))
        self.vector = self.opts.vector or (512 if host_has_avx512() and not masked else 256)
        flags = []
        body = self._emit(self.items, flags)
        pre = [_stmt("_eagle_simd_rt.apart()")]
        pre += [_stmt("_eagle_simd_rt.wide()")] if self.vector == 512 else []
        pre += [_stmt(f"{v}__eagle_v = {v}[{B} - {PO}:]") for v in sorted(self.views)]
        init = []
        for c, op in self.plugin.cells.items():
            init.append(_stmt(f"{c}[{S}] = {float_literal(IDENTITY[op])}"))
        for a in self.lane_args:
            init.append(_stmt(f"{a}__eagle_t[{S}] = {a}"))
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
        return any(isinstance(it, tuple) and it[0] in ("loop", "mwhile") for it in self._walk_items(self.items))

    def _emit(self, items, flags):
        out = []
        for it in items:
            if isinstance(it, _Seg):
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
                    out.append(_stmt(f"{st.targets[0].id}[:] = {fill}"))
                continue
            out.append(copy.deepcopy(st))
        r = _Index(self.idx, self.planes, self.cells)
        out = [r.visit(st) for st in out]
        self.views |= r.views
        return out

    def _loop(self, body):
        return ast.For(ast.Name(S, ast.Store()), _expr(f"{RANGE}({N})"), body, [], None)

    def _head(self, names):
        """The first lines of a sample's iteration: its index and its state."""
        out = [_stmt(f"{self.idx} = {B} + {S}")]
        out += [_stmt(f"{v} = {v}__eagle_t[{S}]") for v in sorted(names & set(self.state))]
        out += [_stmt(f"{v} = {v}__eagle_A[:, {S}]") for v in sorted(names & set(self.arrays))]
        return out

    def _tail(self, names):
        return [_stmt(f"{v}__eagle_t[{S}] = {v}") for v in sorted(names & set(self.state))]

    def _segment(self, stmts):
        region = ast.Module(stmts, [])
        return self._loop(self._head(_names(region)) + self._rewrite(stmts) + self._tail(_stores(region)))

    # hoisted loops
    def _hoisted(self, it, flags):
        s, body, orelse = it[1], it[2], it[3]
        if (isinstance(s, ast.For) and self.opts.unroll > 1 and len(body) == 1 and isinstance(body[0], _Seg)
                and not orelse and isinstance(s.target, ast.Name) and _literal_range(s.iter) is None
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
        reads_t = t in _names(ast.Module(stmts, []))
        region = ast.Module(stmts, [])
        names, stores = _names(region), _stores(region)

        def copies(count, offset):
            body = []
            for u in range(count):
                if reads_t:
                    body.append(_stmt(f"{t} = {lo_n} + ({q} + {u}) * {st_n}" if offset else
                                      f"{t} = {lo_n} + {q} * {st_n}"))
                body += self._rewrite(stmts)
            return self._loop(self._head(names) + body + self._tail(stores))

        out = [_stmt(f"{lo_n} = {lo}"), _stmt(f"{m} = {LEN}({RANGE}({lo_n}, {hi}, {st}))"),
               _stmt(f"{st_n} = {st}"), _stmt(f"{q} = 0")]
        out.append(ast.While(_expr(f"{q} + {U} <= {m}"), [copies(U, True), _stmt(f"{q} += {U}")], []))
        out.append(ast.While(_expr(f"{q} < {m}"), [copies(1, False), _stmt(f"{q} += 1")], []))
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
        names, stores = _names(region), _stores(region)
        body = self._rewrite(s.body)
        if any(True for _ in _own_exits(s.body)):
            body = self.lt._flat(body, flag)
            body = [ast.For(ast.Name("_eagle_once", ast.Store()), _expr(f"{RANGE}(1)"), body, [], None)]
        stop = [_stmt(f"{flag} = False")] + self._rewrite(s.orelse)
        test = self._rewrite([ast.Expr(s.test)])[0].value
        step = (self._head(names) + [_stmt(f"{flag} = {arr}[{S}]"),
                                     ast.If(ast.Name(flag, ast.Load()), [ast.If(test, body, stop)], [])]
                + self._tail(stores) + [_stmt(f"{arr}[{S}] = {flag}"), _stmt(f"{left} += {flag}")])
        return [self._loop([_stmt(f"{arr}[{S}] = True")]),
                ast.While(ast.Constant(True), [_stmt(f"{left} = 0"), self._loop(step),
                                               ast.If(_expr(f"{left} == 0"), [ast.Break()], [])], [])]


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
                                               or e.id in t.lt.params or e.id in t.lt.consts)
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
            self.t._hoist_count += 1
            name = f"_eagle_h{self.t._hoist_count}"
            self.found.append((name, node))
            return ast.Name(name, ast.Load())
        return super().visit(node)


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


__all__ = ["ENV", "VECTOR_ENV", "Options", "TILE", "TILES", "UNROLL", "Built", "build", "choose",
           "default_options", "host_has_avx512", "refusal", "same_type", "wide", "apart", "dtype_of",
           "ALIASES", "RANGE", "LEN", "MIN"]
