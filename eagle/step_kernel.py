"""A step kernel made into the kernel that runs it until done: checked, transformed, deployed.

A *step kernel* is an ordinary kernel whose body is one step of one sample and which writes its
finish condition into an output plane (``done[i] = 1`` when the sample is done; named by
``Plan.run_until_done(done_plane=...)``, ``"done"`` unless told).  ``loop_plugin(plugin, done)`` derives,
once per plugin, the kernel the rounds of ``eagle.until_done`` run:

* the step body inside ``while k < budget and steps[i] < cap and done[i] == 0``, counting the
  steps each sample took in an extra plane;
* every ``Out`` becomes ``Mutable`` (a sample's state lives in its planes between rounds) and
  every ``Cell`` a float64 ``Mutable`` plane holding the sample's last contribution;
* the sample's own plane subscripts (``x[i]``, ``x[i, k]``) stay on its position in the
  compacted planes a round runs on; every other use of the index (a value passed to
  ``eagle.random``, a Table subscript, arithmetic) reads the sample's original index from an
  extra ``In`` plane, so that nothing the body computes depends on which samples remain.

Only sample-local step kernels qualify (every plane touched only at ``[i]``); the rest, a
``return`` in the body and a body that never writes its finish condition are refused by name.
"""
from __future__ import annotations

import ast
import copy
import threading

from .access import SAMPLE_LOCAL
from .plugin import INTEGRITY, Plugin, _role_to_json, _sha, field_hashes
from .roles import Mutable, In, Param

SAMPLE_KINDS = ("In", "Out", "Mutable", "Cell")
_LOCK = threading.Lock()
_LOOPS = {}


class Loop:
    """The derived plugin and the names of its extra arguments."""

    def __init__(self, plugin, done, origin, steps, budget, cap):
        self.plugin, self.done = plugin, done
        self.origin, self.steps, self.budget, self.cap = origin, steps, budget, cap


def _own(sub, idx):
    index = sub.slice
    first = index.elts[0] if isinstance(index, ast.Tuple) and index.elts else index
    return isinstance(first, ast.Name) and first.id == idx


def check_step_kernel(plugin, fdef, done):
    """Refuse, naming the kernel, a step kernel that cannot run until done."""
    k, idx = plugin.name, plugin.index_name
    role = plugin.roles.get(done)
    if role is None or role.kind not in ("Out", "Mutable"):
        what = "has no argument" if role is None else f"has {done!r} as a {role!r}, not an output plane"
        raise ValueError(f"kernel {k!r} {what} {done!r} for its finish condition: a step kernel writes "
                         f"done[i] = 1 when a sample is done into an Out or Mutable plane; name it with "
                         f"run_until_done(done_plane='...')")
    if plugin.exec_access != SAMPLE_LOCAL:
        raise ValueError(f"kernel {k!r} is {plugin.exec_access}: only a sample_local step kernel (every plane "
                         "touched only at [i]) runs until done, since finished samples are dropped between rounds")
    planes = {n for n, r in plugin.roles.items() if r.kind in SAMPLE_KINDS}
    parents = {id(c): p for p in ast.walk(fdef) for c in ast.iter_child_nodes(p)}
    writes_done = False
    for node in ast.walk(fdef):
        if isinstance(node, ast.Return):
            raise ValueError(f"kernel {k!r}: a step kernel has no return (line {node.lineno} of its source): "
                             "each step runs to its end; test done with if instead")
        if isinstance(node, ast.Name) and node.id in planes:
            sub = parents.get(id(node))
            if not (isinstance(sub, ast.Subscript) and sub.value is node and _own(sub, idx)):
                raise ValueError(f"kernel {k!r} uses plane {node.id!r} other than as {node.id}[{idx}] (line "
                                 f"{node.lineno} of its source): a step kernel may touch only its own sample, "
                                 "and the number of samples changes as finished samples are dropped")
            if node.id == done and isinstance(sub.ctx, ast.Store):
                writes_done = True
    if not writes_done:
        raise ValueError(f"kernel {k!r} never writes its finish condition {done}[{idx}]: a step kernel sets "
                         f"{done}[{idx}] = 1 when the sample is done (or the run never ends)")


class _Origin(ast.NodeTransformer):
    """``i`` -> ``origin[i]`` everywhere but the first index of a sample plane's subscript."""

    def __init__(self, idx, planes, origin):
        self.idx, self.planes, self.origin = idx, planes, origin

    def visit_Subscript(self, node):
        if isinstance(node.value, ast.Name) and node.value.id in self.planes:
            if isinstance(node.slice, ast.Tuple):
                node.slice.elts[1:] = [self.visit(e) for e in node.slice.elts[1:]]
            return node
        return self.generic_visit(node)

    def visit_Name(self, node):
        if node.id == self.idx and isinstance(node.ctx, ast.Load):
            return ast.Subscript(value=ast.Name(self.origin, ast.Load()), slice=ast.Name(self.idx, ast.Load()),
                                 ctx=ast.Load())
        return node


def _fresh(base, taken):
    name = base
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _loop_source(plugin, fdef, done):
    idx = plugin.index_name
    taken = {n.id for n in ast.walk(fdef) if isinstance(n, ast.Name)} | set(plugin.roles) | {idx}
    names = [_fresh(b, taken) for b in ("eagle_origin", "eagle_steps", "eagle_budget", "eagle_cap", "eagle_k")]
    origin, steps, budget, cap, k = names
    planes = {n for n, r in plugin.roles.items() if r.kind in SAMPLE_KINDS}
    fdef = copy.deepcopy(fdef)
    body = [_Origin(idx, planes, origin).visit(s) for s in fdef.body]
    if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:] or [ast.Pass()]              # the docstring
    own = f"[{idx}]"
    loop = ast.parse(f"{k} = 0\nwhile {k} < {budget} and {steps}{own} < {cap} and {done}{own} == 0:\n"
                     f"    pass\n    {steps}{own} = {steps}{own} + 1\n    {k} = {k} + 1\n").body
    loop[1].body[0:1] = body
    fdef.body = loop
    fdef.decorator_list = []
    fdef.returns = None
    for a in fdef.args.args:
        a.annotation = None
    fdef.args.args += [ast.arg(n) for n in (origin, steps, budget, cap)]
    fdef.name = f"{plugin.name}_until_done"
    return ast.unparse(ast.fix_missing_locations(fdef)) + "\n", names[:4]


def _derive(plugin, done):
    fdef = ast.parse(plugin.source).body[0]
    check_step_kernel(plugin, fdef, done)
    source, (origin, steps, budget, cap) = _loop_source(plugin, fdef, done)
    spec = [(Mutable if r.kind in ("Out", "Cell") else r, n) for r, n in plugin.arg_spec]
    spec += [(In, origin), (Mutable, steps), (Param, budget), (Param, cap)]
    m = dict(plugin.manifest)
    m.pop(INTEGRITY)
    m.update(name=f"{plugin.name}_until_done", arg_spec=[_role_to_json(r, n) for r, n in spec], access=SAMPLE_LOCAL,
             declared_access=None, op=None, cells={}, source_hash=_sha(source), first_line=1)
    m[INTEGRITY] = field_hashes(m)
    return Loop(Plugin(m, source), done, origin, steps, budget, cap)


def loop_plugin(plugin, done) -> Loop:
    """The kernel that runs ``plugin``'s step until done (``Loop``), derived once per plugin."""
    key = (plugin.key, done)
    with _LOCK:
        if key not in _LOOPS:
            _LOOPS[key] = _derive(plugin, done)
        return _LOOPS[key]
