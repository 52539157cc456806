"""Access inference: what a kernel body reads and writes, read from its source.

The classes, from narrowest to widest:

* ``sample_local``       -- reads and writes only ``plane[i]``;
* ``cross_sample_read``  -- reads an ``In`` plane at an index other than ``i``;
* ``cross_sample_write`` -- writes an ``Out``/``Mutable`` plane at an index other than ``i``;
* ``mapreduce``          -- every output is a ``Cell`` (whatever the inputs are read like).

A plane is reached only by its own name: indexed (``x[k]``, ``q[i, k]``), asked its metadata,
or passed to a helper; bound to another name, sliced, iterated, or indexed through an
expression (``x[i][k]``) it is refused at deploy with the line, so every index of it is checked
(``eagle.bounds``).  A plane passed to a helper is classified conservatively: as read at other
samples if it is an input, as written at other samples if it is an output.  Reading another sample's ``Out``/``Mutable`` is a race and is
refused, as is any use of a ``Cell`` other than ``cell[i] = value``.

A ``Table`` reads no sample's data and does not change the class: it may only be read
(``t[k]``, ``t[a, b]``) or asked its metadata (``t.shape``, ``len(t)``); a write, and any use
the analysis cannot see through (aliased, passed to a function), is refused by name
(``table_uses``).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .roles import OUTPUT_KINDS, PLANE_KINDS, TABLE
from .syntax import parse

SAMPLE_LOCAL = "sample_local"
CROSS_SAMPLE_READ = "cross_sample_read"
CROSS_SAMPLE_WRITE = "cross_sample_write"
MAPREDUCE = "mapreduce"
ACCESS_CLASSES = (SAMPLE_LOCAL, CROSS_SAMPLE_READ, CROSS_SAMPLE_WRITE, MAPREDUCE)

# how wide each class is: an explicit access= may only widen the inferred one
_WIDTH = {SAMPLE_LOCAL: 0, MAPREDUCE: 0, CROSS_SAMPLE_READ: 1, CROSS_SAMPLE_WRITE: 2}
_METADATA_ATTRS = {"shape", "size", "ndim", "dtype"}


@dataclass
class PlaneUse:
    """How the body uses one plane."""
    own_only: bool = True        # touched only as plane[i] / plane[i, k]: the plane can be sliced
    index_dims: int = 0          # the most subscripts seen with i first (2 means plane[i, k])
    subscripts: set = field(default_factory=set)   # how many indices each subscript of it has
    opaque: bool = False         # also used in a way the analysis cannot see through
    reads_other: bool = False
    writes_other: bool = False


@dataclass
class Access:
    access: str
    reads_other_samples: bool
    planes: dict = field(default_factory=dict)   # name -> PlaneUse
    range_params: set = field(default_factory=set)   # Params passed straight to range(...)
    tables: dict = field(default_factory=dict)   # Table name -> the index counts it is subscripted with


#: constructs a kernel body may not use, and why (each refused by name at deploy)
UNSUPPORTED = (
    ((ast.Yield, ast.YieldFrom), "yield", "a kernel runs once per sample and returns nothing; a yield would "
     "make it a generator whose body never runs"),
    ((ast.Await, ast.AsyncFor, ast.AsyncWith), "async code", "a kernel body is compiled, not awaited"),
    ((ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef), "a nested function or class",
     "define a helper at module level (a def) and call it"),
    ((ast.Try, getattr(ast, "TryStar", ast.Try)), "try/except", "compiled kernels catch no exceptions (and the "
     "device has none): test the values with if, and raise to stop the run"),
    ((ast.With,), "with", "a kernel body has no context managers"),
    ((ast.Global, ast.Nonlocal), "global/nonlocal", "a kernel writes only its planes and cells"),
    ((ast.Import, ast.ImportFrom), "import", "import at module level; the kernel uses the module's names"),
)


def _is_own(index, idx):
    """True if a subscript's index is i or (i, ...)."""
    if isinstance(index, ast.Name):
        return index.id == idx, 1
    if isinstance(index, ast.Tuple) and index.elts:
        first = index.elts[0]
        return isinstance(first, ast.Name) and first.id == idx, len(index.elts)
    return False, 0


def analyse(fdef: ast.FunctionDef, idx: str, roles: dict, kname: str, line0: int,
            declared: str | None = None, frozen=None) -> Access:
    """Classify the body of ``fdef``; ``roles`` maps parameter name to Role.  With ``frozen`` (the
    manifest's entries for the body's free names) a plane passed to a call is checked too
    (``_planes_passed_on``)."""
    def where(node):
        return f"line {line0 + node.lineno - 1}"

    def refuse(node, msg):
        raise ValueError(f"kernel {kname!r}, {where(node)}: {msg}")

    for node in ast.walk(fdef):
        for types, what, why in UNSUPPORTED:
            if node is not fdef and isinstance(node, types):
                refuse(node, f"the body uses {what}, which a kernel does not support: {why}")
    range_params = _range_arguments(fdef, roles, lambda node, msg: f"kernel {kname!r}, {where(node)}: {msg}")
    _refuse_vector_index_of_plain_out(fdef, roles, refuse)
    _refuse_unchecked_subscripts(fdef, refuse)
    if frozen is not None:
        _planes_passed_on(fdef, roles, frozen, refuse)
    tables = table_uses(fdef, roles, refuse)      # first: a table rebound (t = x) is named as the table
    uses = {name: PlaneUse() for name, r in roles.items() if r.kind in PLANE_KINDS}
    cells = {name for name, r in roles.items() if r.kind == "Cell"}
    parents = {}
    for node in ast.walk(fdef):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    for node in ast.walk(fdef):
        if node is fdef:
            continue
        if isinstance(node, ast.Name) and node.id == idx and isinstance(node.ctx, (ast.Store, ast.Del)):
            refuse(node, f"the sample index {idx!r} is reassigned; use another name for a derived index")
        if isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            refuse(node, "a kernel returns nothing: write results to an Out plane or a Cell")
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store) and (
                node.id in uses or node.id in cells):
            _plane_use(node, parents, idx, roles, uses, cells, refuse)
    access, reads_other = _classify(uses, cells, roles, declared, kname)
    return Access(access=access, reads_other_samples=reads_other, planes=uses, range_params=range_params,
                  tables=tables)


def _plane_use(node, parents, idx, roles, uses, cells, refuse):
    """Record in ``uses`` one use of a plane or cell (the Name ``node``), or refuse it."""
    name = node.id
    parent = parents.get(node)
    if isinstance(node.ctx, ast.Del):
        refuse(node, f"{name!r} is deleted")
    # metadata: x.shape, x.size, len(x) -- reads no sample, but the plane cannot be sliced
    if (isinstance(parent, ast.Attribute) and parent.attr in _METADATA_ATTRS) or (
            isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name)
            and parent.func.id == "len" and node in parent.args):
        if name in cells:
            refuse(node, f"cell {name!r} may only be written as {name}[{idx}] = value")
        uses[name].own_only = False
        return
    if isinstance(parent, ast.Subscript) and parent.value is node:
        _subscript_use(node, parent, parents, idx, roles, uses, cells, refuse)
        return
    if name in cells:
        refuse(node, f"cell {name!r} may only be written as {name}[{idx}] = value")
    if not (isinstance(parent, ast.Call) and node in parent.args):
        # bound to another name, iterated, returned: its indices there would escape the checks
        refuse(node, f"plane {name!r} is used other than by its own name ({ast.unparse(parent)}); index it "
                     f"as {name}[k] where it is used (every such index is checked), or pass it to a helper")
    # passed to a function: the analysis cannot see through
    use, kind = uses[name], roles[name].kind
    use.own_only = False
    use.opaque = True
    if kind == "In":
        use.reads_other = True
    else:
        use.writes_other = True


def _subscript_use(node, parent, parents, idx, roles, uses, cells, refuse):
    """``plane[...]`` or ``cell[...]``: its own sample's or another's, read or written."""
    name = node.id
    own, dims = _is_own(parent.slice, idx)
    store = isinstance(parent.ctx, ast.Store)
    if name in cells:
        grand = parents.get(parent)
        if not (own and dims == 1 and store and isinstance(grand, ast.Assign)):
            refuse(node, f"cell {name!r} may only be written as {name}[{idx}] = value "
                         "(this sample's contribution)")
        return
    use, kind = uses[name], roles[name].kind
    sl = parent.slice
    if any(isinstance(e, ast.Slice) for e in (sl.elts if isinstance(sl, ast.Tuple) else [sl])):
        refuse(node, f"slices plane {name!r} ({ast.unparse(parent)}): a view's indices would escape the "
                     f"checks; index it one entry at a time, {name}[k]")
    use.subscripts.add(len(sl.elts) if isinstance(sl, ast.Tuple) else 1)
    if own:
        use.index_dims = max(use.index_dims, dims)
    else:
        use.own_only = False
    if kind == "In":
        if store:
            refuse(node, f"{name!r} is an In plane and read-only; declare it Mutable to update it")
        if not own:
            use.reads_other = True
    elif store and not own:
        use.writes_other = True
    elif not own:
        refuse(node, f"reads another sample's {kind} plane {name!r}: a race between "
                     f"samples; read only {name}[{idx}], or pass the values as an In plane")


def _classify(uses, cells, roles, declared, kname):
    """``(access class, reads other samples)`` from the planes' uses and the declared access."""
    writes_other = any(u.writes_other for u in uses.values())
    reads_other = any(u.reads_other for u in uses.values())
    has_outputs = any(roles[n].kind in OUTPUT_KINDS for n in uses)
    if writes_other:
        inferred = CROSS_SAMPLE_WRITE
    elif cells and not has_outputs:
        inferred = MAPREDUCE
    elif reads_other:
        inferred = CROSS_SAMPLE_READ
    else:
        inferred = SAMPLE_LOCAL
    access = inferred
    if declared is not None:
        if declared not in ACCESS_CLASSES:
            raise ValueError(f"kernel {kname!r}: unknown access {declared!r}; one of {', '.join(ACCESS_CLASSES)}")
        if declared == MAPREDUCE and (has_outputs or not cells):
            raise ValueError(f"kernel {kname!r}: access='mapreduce' needs every output to be a Cell")
        if _WIDTH[declared] < _WIDTH[inferred]:
            raise ValueError(
                f"kernel {kname!r}: access={declared!r} is narrower than what the body does "
                f"({inferred}); an explicit access may only widen the inferred one")
        if _WIDTH[declared] > _WIDTH[inferred]:
            access = declared
            # a widened kernel is treated as touching other samples: it gets whole planes
            reads_other = True
            for u in uses.values():
                u.own_only = False
    return access, reads_other


def table_uses(fdef, roles, refuse) -> dict:
    """Each Table's subscript counts (``{name: {1}}`` for ``t[k]``); a table written, deleted,
    aliased or passed to a function is refused (``refuse(node, message)``)."""
    tables = {name: set() for name, r in roles.items() if r.kind == TABLE}
    if not tables:
        return {}
    parents = {child: node for node in ast.walk(fdef) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(fdef):
        if not (isinstance(node, ast.Name) and node.id in tables) or node is fdef:
            continue
        name, parent = node.id, parents.get(node)
        if not isinstance(node.ctx, ast.Load):
            refuse(node, f"{name!r} is a Table, which is read-only: it cannot be assigned or deleted")
        if isinstance(parent, ast.Attribute) and parent.attr in _METADATA_ATTRS:
            continue
        if (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "len"
                and node in parent.args):
            continue
        if isinstance(parent, ast.Subscript) and parent.value is node:
            if not isinstance(parent.ctx, ast.Load):
                refuse(node, f"writes Table {name!r}: a table is read-only, shared by every sample; "
                             "write results to an Out plane or a Cell")
            sl = parent.slice
            if any(isinstance(e, ast.Slice) for e in (sl.elts if isinstance(sl, ast.Tuple) else [sl])):
                refuse(node, f"slices Table {name!r}: read one entry at a time, {name}[k] or {name}[a, b]")
            tables[name].add(len(sl.elts) if isinstance(sl, ast.Tuple) else 1)
            continue
        refuse(node, f"uses Table {name!r} in a way eagle cannot check (aliased, passed to a function, "
                     f"iterated): read its entries as {name}[k] in the body, and its size as {name}.shape[0]")
    return {name: sorted(counts) for name, counts in tables.items()}


def _range_arguments(fdef, roles, message) -> set:
    """Params passed straight to ``range(...)`` (a float there must be refused at run, as Python
    does: numba would truncate it); a float literal there is refused now."""
    params = set()
    for node in ast.walk(fdef):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
            for a in node.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, float):
                    raise TypeError(message(a, f"range({a.value!r}): range takes integers, as in Python"))
                if isinstance(a, ast.Name) and a.id in roles and roles[a.id].kind == "Param":
                    params.add(a.id)
    return params


def _refuse_unchecked_subscripts(fdef, refuse):
    """A subscript of anything but a name or ``name.shape`` (``x[1:][k]``, ``q[i][k]``, ``f()[k]``):
    refused, since eagle checks the indices of what a name holds (``eagle.bounds``)."""
    for stmt in fdef.body:
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Subscript) or isinstance(node.value, ast.Name):
                continue
            v = node.value
            if isinstance(v, ast.Attribute) and v.attr == "shape" and isinstance(v.value, ast.Name):
                continue
            refuse(node, f"{ast.unparse(node)} indexes an expression; bind the array to a name first or index "
                         "a plane as x[a, b] (eagle checks the indices of what a name holds)")


def _planes_passed_on(fdef, roles, frozen, refuse):
    """A plane may be an argument only of a helper eagle compiles from source (its indices checked
    there: ``eagle.bounds``); an ``In`` plane only where that helper reads it, ``p[k]``."""
    helpers = {g["name"]: g for g in frozen if g["kind"] == "function"}
    for stmt in fdef.body:
        for call in ast.walk(stmt):
            if not isinstance(call, ast.Call):
                continue
            f = call.func
            if isinstance(f, ast.Name) and f.id == "len" and "len" not in {g["name"] for g in frozen}:
                continue
            args = [(k, a) for k, a in enumerate(call.args)] + [(None, kw.value) for kw in call.keywords]
            for pos, a in args:
                a = a.value if isinstance(a, ast.Starred) else a
                if not (isinstance(a, ast.Name) and roles.get(a.id) is not None and roles[a.id].kind in PLANE_KINDS):
                    continue
                if not (isinstance(f, ast.Name) and f.id in helpers and pos is not None):
                    refuse(a, f"passes plane {a.id!r} to {ast.unparse(f)}, which eagle does not compile with "
                              f"bounds checks; pass values ({a.id}[k]) or a helper defined in Python")
                if roles[a.id].kind == "In":
                    _helper_reads_only(helpers[f.id], pos, a.id, refuse, a)


def _helper_reads_only(g, pos, plane, refuse, at, depth=0):
    """Refuse (at the kernel's ``at``) a helper that writes, re-binds or passes on the ``In`` plane
    it receives as its argument ``pos``, other than to another helper that only reads it."""
    h = parse(g["source"]).body[0]
    params = [a.arg for a in h.args.args]
    if pos >= len(params) or depth > 8:
        refuse(at, f"passes In plane {plane!r} to helper {g['name']!r} in a way eagle cannot follow")
    p = params[pos]
    inner = {e["name"]: e for e in g["frozen"] if e["kind"] == "function"}
    parents = {c: n for n in ast.walk(h) for c in ast.iter_child_nodes(n)}
    for n in ast.walk(h):
        if not (isinstance(n, ast.Name) and n.id == p):
            continue
        up = parents.get(n)
        if isinstance(n.ctx, ast.Load) and isinstance(up, ast.Subscript) and up.value is n and isinstance(
                up.ctx, ast.Load):
            continue
        if isinstance(up, ast.Attribute) and up.attr in _METADATA_ATTRS:
            continue
        if isinstance(up, ast.Call) and n in up.args and isinstance(up.func, ast.Name) and up.func.id in inner:
            _helper_reads_only(inner[up.func.id], up.args.index(n), plane, refuse, at, depth + 1)
            continue
        refuse(at, f"passes In plane {plane!r} to helper {g['name']!r}, which does more than read it "
                   f"({ast.unparse(up)}): an In plane is read-only; the helper may only read it as {p}[k]")


def _refuse_vector_index_of_plain_out(fdef, roles, refuse):
    """``y[i, k]`` on a plain ``Out`` (one value per sample, an (n,) plane eagle allocates):
    refused at deploy, pointing to ``Out[w]``."""
    for node in ast.walk(fdef):
        if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) > 1):
            continue
        role = roles.get(node.value.id)
        if role is not None and role.kind == "Out" and role.width is None:
            name = node.value.id
            refuse(node, f"{ast.unparse(node)} indexes Out plane {name!r} as (n, w), but it is declared "
                         f"Out (one value per sample, an (n,) plane); declare it Out[w] for w values per "
                         f"sample (e.g. {name}: Out[3])")
