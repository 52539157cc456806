"""Freezing a kernel's globals at deploy: what the body's free names mean, as manifest entries.

Numbers are frozen as constants (their exact value, as data); modules and compiled functions
become imports; a helper that cannot be imported (defined in ``__main__`` or a notebook, or a
plain Python function) is compiled from its own source with the kernel, its own globals frozen
the same way.  Stateful randomness and clocks (Python's ``random``, ``numpy.random``, ``time``)
are refused: a draw would depend on which thread, rank or worker ran the sample before.
"""
from __future__ import annotations

import ast
import builtins
import importlib.util
import inspect
import keyword
import textwrap
import types

import numpy as np

from .access import UNSUPPORTED
from .kernel import Kernel
from .syntax import parse

#: helper functions compiled from source may call others this deep
MAX_HELPER_DEPTH = 8
#: modules whose functions keep hidden state between calls: refused in a kernel
STATEFUL = ("random", "numpy.random", "time", "secrets")

NUMBER_TYPES = (bool, int, float, complex, np.bool_, np.integer, np.floating, np.complexfloating)

#: the modules (and their submodules) a loaded artifact may import without ``trust=True``: what
#: kernels use.  Importing any other module runs its code, so it needs the user's word.
TRUSTED_MODULES = ("math", "cmath", "numpy", "numba", "eagle")


def _free_names(fdef: ast.FunctionDef):
    """Names the body loads that it does not bind itself, in order of first use."""
    bound = {a.arg for a in fdef.args.args + fdef.args.posonlyargs}
    body = [node for stmt in fdef.body for node in ast.walk(stmt)]   # annotations are not the body's
    for node in body:
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.Lambda)) and node is not fdef:
            if isinstance(node, ast.FunctionDef):
                bound.add(node.name)
            bound.update(a.arg for a in node.args.args)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    seen = []
    for node in body:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in bound:
            if node.id not in seen:
                seen.append(node.id)
    return seen


def _freeze_value(kname, name, value, depth=0):
    """One global of the body as a manifest entry, or a refusal naming it."""
    if isinstance(value, NUMBER_TYPES):
        t = type(value)
        tname = t.__name__ if t in (bool, int, float, complex) else np.dtype(t).name
        v = value.item() if isinstance(value, np.generic) else value
        if isinstance(v, float):
            text = v.hex()
        elif isinstance(v, complex):
            text = [v.real.hex(), v.imag.hex()]
        else:
            text = repr(v)
        return {"name": name, "kind": "const", "type": tname, "value": text}
    if isinstance(value, types.ModuleType):
        return {"name": name, "kind": "module", "module": value.__name__}
    if isinstance(value, np.ndarray):
        raise ValueError(f"kernel {kname!r} reads the module-level array {name!r}; arrays are not frozen "
                         f"into a kernel: pass it as a plane (an In argument) instead")
    if isinstance(value, Kernel):
        raise ValueError(f"kernel {kname!r} calls the kernel {name!r}; a kernel is launched by eagle, "
                         "not called from another one: use a @numba.njit helper")
    if isinstance(value, np.ufunc):
        return {"name": name, "kind": "import", "module": "numpy", "attr": value.__name__}
    py = getattr(value, "py_func", None)            # a numba dispatcher
    mod = getattr(py if py is not None else value, "__module__", None)
    attr = getattr(py if py is not None else value, "__name__", None)
    if callable(value) and mod and attr:
        builtin = py is None and (isinstance(value, types.BuiltinFunctionType) or mod in ("math", "cmath")
                                  or hasattr(value, "_numba_type_") or mod.startswith(("numpy", "numba")))
        importable = not (mod == "__main__" or mod.startswith("__"))
        if builtin or (py is not None and importable):
            return {"name": name, "kind": "import", "module": mod, "attr": attr}
        if isinstance(value, types.FunctionType) or py is not None:
            return _function_entry(kname, name, py if py is not None else value, depth)
    raise ValueError(f"kernel {kname!r} reads the module-level name {name!r} of type "
                     f"{type(value).__name__}; a kernel may use numbers (frozen at deploy), modules "
                     "and functions -- pass anything else as a plane or a Param")


def _function_entry(kname, name, fn, depth):
    """A helper the kernel calls, compiled from its source with the kernel (a function defined in
    ``__main__`` or a notebook cannot be imported on a worker; a plain Python function is not
    compiled yet).  Its own globals are frozen the same way."""
    if depth >= MAX_HELPER_DEPTH:                  # depth 0: a helper the kernel calls itself
        raise ValueError(f"kernel {kname!r}: helper functions nest more than {MAX_HELPER_DEPTH} deep "
                         f"(at {name!r})")
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        raise ValueError(f"kernel {kname!r} calls {name!r}, whose source cannot be read; define it in a "
                         "file, a script or a notebook cell") from None
    fdef = parse(src).body[0]
    if not isinstance(fdef, ast.FunctionDef) or fn.__name__ == "<lambda>":
        raise ValueError(f"kernel {kname!r} calls {name!r}, which is not a plain function (def ...)")
    fdef.decorator_list = []
    fdef.name = name
    fdef.returns = None                            # annotations would run when the module runs
    for a in fdef.args.posonlyargs + fdef.args.args + fdef.args.kwonlyargs:
        a.annotation = None
    source = ast.unparse(fdef)
    check_helper_source(source, name, f"kernel {kname!r}: ")
    nested = _freeze_names(kname, fdef, fn, depth + 1)
    return {"name": name, "kind": "function", "source": source, "frozen": nested}


def _freeze_names(kname, fdef, fn, depth=0) -> list:
    """Resolve a function's free names: numbers frozen, modules imported, helpers compiled."""
    closure = {}
    if fn.__closure__:
        for var, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                closure[var] = cell.cell_contents
            except ValueError:
                pass
    frozen = []
    for name in _free_names(fdef):
        if name in closure:
            value = closure[name]
        elif name in fn.__globals__:
            value = fn.__globals__[name]
        elif hasattr(builtins, name):
            continue
        else:
            where = "the kernel" if depth == 0 else f"helper {fdef.name!r}"
            raise NameError(f"kernel {kname!r} uses {name!r}, which is not defined where {where} is")
        frozen.append(_freeze_value(kname, name, value, depth))
    return frozen


def _stateful(module: str | None) -> bool:
    return bool(module) and any(module == m or module.startswith(m + ".") for m in STATEFUL)


def _refuse_stateful(kname, fdef, frozen, where):
    """Refuse a use of Python's ``random``, ``numpy.random`` or ``time`` in ``fdef`` (the kernel or
    a helper compiled with it), naming the line and pointing to ``eagle.random``."""
    modules = {g["name"]: g["module"] for g in frozen if g["kind"] == "module"}
    direct = {g["name"]: f"{g['module']}.{g.get('attr', '')}".rstrip(".") for g in frozen
              if g["kind"] in ("module", "import") and _stateful(g["module"])}
    for node in ast.walk(fdef):
        what = None
        if isinstance(node, ast.Name) and node.id in direct:
            what = direct[node.id]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            full = f"{modules[node.value.id]}.{node.attr}"
            if _stateful(full):
                what = full
        if what is not None:
            raise ValueError(f"kernel {kname!r}, {where(node)}: uses {what}, whose results depend on what ran "
                             "before (which thread, rank or worker, and in what order), so the bits would "
                             "change with the split; draw with eagle.random (uniform, normal, ... of (seed, "
                             "sample, counter)) instead")
    for g in frozen:
        if g["kind"] == "function":
            helper = parse(g["source"]).body[0]
            _refuse_stateful(kname, helper, g["frozen"], lambda n, h=g["name"]: f"helper {h!r}")


def freeze_globals(k: Kernel, fdef) -> list:
    """Resolve the body's free names at deploy: numbers frozen, modules and functions imported,
    helpers that cannot be imported compiled from their source; stateful randomness refused."""
    frozen = _freeze_names(k.name, fdef, k.fn)
    _refuse_stateful(k.name, fdef, frozen, lambda n: f"line {k.first_line + n.lineno - 1}")
    _refuse_linear_algebra_without_scipy(k.name, fdef, frozen, lambda n: f"line {k.first_line + n.lineno - 1}")
    return frozen


#: what numba compiles with scipy's BLAS and LAPACK (numba.np.linalg): numpy.linalg, dot, vdot and @
NEEDS_SCIPY = ("numpy.linalg", "numpy.dot", "numpy.vdot")


def _needs_scipy(name: str | None) -> bool:
    return bool(name) and any(name == m or name.startswith(m + ".") for m in NEEDS_SCIPY)


def _dotted(node, modules):
    """``np.linalg.inv`` as ``numpy.linalg.inv`` when its root is a module the body imports."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in modules:
        return ".".join([modules[node.id], *reversed(parts)])
    return None


def _refuse_linear_algebra_without_scipy(kname, fdef, frozen, where):
    """Refuse at deploy, naming the call, numpy's linear algebra in ``fdef`` (the kernel or a
    helper compiled with it) when scipy, whose BLAS and LAPACK numba compiles it with, is not
    installed; with scipy it compiles."""
    if importlib.util.find_spec("scipy") is not None:
        return
    modules = {g["name"]: g["module"] for g in frozen if g["kind"] == "module"}
    direct = {g["name"]: f"{g['module']}.{g['attr']}" for g in frozen if g["kind"] == "import"}
    for node in ast.walk(fdef):
        what = None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            what = "the @ operator (numpy.matmul)"
        elif isinstance(node, ast.Name) and _needs_scipy(direct.get(node.id)):
            what = direct[node.id]
        elif isinstance(node, ast.Attribute) and _needs_scipy(_dotted(node, modules)):
            what = _dotted(node, modules)
        if what is not None:
            raise ValueError(f"kernel {kname!r}, {where(node)}: uses {what}, which numba compiles with "
                             "scipy's BLAS and LAPACK, and scipy is not installed: pip install scipy")
    for g in frozen:
        if g["kind"] == "function":
            helper = parse(g["source"]).body[0]
            _refuse_linear_algebra_without_scipy(kname, helper, g["frozen"], lambda n, h=g["name"]: f"helper {h!r}")


# -- frozen entries read back as data (from a manifest that may have been edited) ----------------
_SCALAR_KINDS = "biufc"


def check_name(text, what):
    """Refuse ``text`` unless it is a Python name (generated code and cache file names use it)."""
    if not (isinstance(text, str) and text.isidentifier() and not keyword.iskeyword(text)):
        raise ValueError(f"{what} {text!r} is not a Python name")
    return text


def _literal(node) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (bool, int, float, complex, type(None)))


def check_function_source(source, what, prefix="") -> ast.FunctionDef:
    """Refuse a source that is more than one plain function: no other module-level statement and
    no decorator (each would run when the generated module runs)."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError, TypeError) as e:
        raise ValueError(f"{prefix}{what} is not Python source ({e})") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        extra = next((n for n in tree.body if not isinstance(n, ast.FunctionDef)), tree.body[-1] if tree.body else None)
        at = f" (line {extra.lineno}: {type(extra).__name__})" if extra is not None else ""
        raise ValueError(f"{prefix}{what} must be exactly one function definition and nothing else{at}; "
                         "deploy the kernel again and save it again")
    fdef = tree.body[0]
    if fdef.decorator_list:
        raise ValueError(f"{prefix}{what} has a decorator (line {fdef.decorator_list[0].lineno}); a saved source "
                         "has none: deploy the kernel again and save it again")
    return fdef


def check_helper_source(source, name, prefix="") -> None:
    """A helper's source as strictly as a kernel's: one plain function named ``name``, whose
    defaults are literal numbers, with no annotations, and a body without the constructs a kernel
    body refuses (``eagle.access.UNSUPPORTED``: with, import, nested functions...)."""
    what = f"helper {name!r}"
    fdef = check_function_source(source, what, prefix)
    if fdef.name != name:
        raise ValueError(f"{prefix}{what}: its source defines {fdef.name!r}")
    args = fdef.args
    for d in args.defaults + [d for d in args.kw_defaults if d is not None]:
        if not _literal(d):
            raise ValueError(f"{prefix}{what}: a default value must be a literal number (line {d.lineno}: "
                             f"{ast.unparse(d)!r} would run when the module runs)")
    if fdef.returns is not None or any(a.annotation is not None for a in args.posonlyargs + args.args
                                       + args.kwonlyargs + [args.vararg, args.kwarg] if a is not None):
        raise ValueError(f"{prefix}{what}: has annotations, which would run when the module runs")
    for node in ast.walk(fdef):
        for types_, construct, why in UNSUPPORTED:
            if node is not fdef and isinstance(node, types_):
                raise ValueError(f"{prefix}{what}, line {node.lineno}: uses {construct}, which a helper compiled "
                                 f"with a kernel does not support: {why}")


def trusted(module: str) -> bool:
    """Whether ``module`` is in ``TRUSTED_MODULES`` (or a submodule of one)."""
    return any(module == m or module.startswith(m + ".") for m in TRUSTED_MODULES)


def modules_named(frozen) -> list:
    """Every module the frozen entries (helpers' included) import, in order, once each."""
    found = []
    for g in frozen:
        kind = g.get("kind")
        names = (modules_named(g.get("frozen", [])) if kind == "function"
                 else [g.get("module")] if kind in ("module", "import") else [])
        found += [m for m in names if m not in found]
    return found


def _identifier(text, what, dotted=False):
    parts = text.split(".") if (dotted and isinstance(text, str)) else [text]
    if not all(isinstance(p, str) and p.isidentifier() and not keyword.iskeyword(p) for p in parts):
        raise ValueError(f"frozen global: {what} {text!r} is not a Python {'dotted name' if dotted else 'name'}")
    return text


def _float(text, name):
    if not isinstance(text, str):
        raise ValueError(f"frozen constant {name!r}: a float is stored as its exact hex text, not {text!r}")
    try:
        return float.fromhex(text)
    except (ValueError, OverflowError):
        raise ValueError(f"frozen constant {name!r}: {text!r} is not a float in hex") from None


def const_value(g):
    """The Python value of a frozen constant entry, parsed as data (never evaluated)."""
    name, t, v = g["name"], g.get("type"), g.get("value")
    if t == "float":
        return _float(v, name)
    if t == "complex" or (isinstance(t, str) and t.startswith("complex")):
        if not (isinstance(v, list) and len(v) == 2):
            raise ValueError(f"frozen constant {name!r}: a complex is stored as [real, imag] hex texts")
        z = complex(_float(v[0], name), _float(v[1], name))
        if t == "complex":
            return z
    if t == "bool":
        if v not in ("True", "False"):
            raise ValueError(f"frozen constant {name!r}: {v!r} is not True or False")
        return v == "True"
    try:
        dtype = np.dtype(t) if t != "int" else None
    except TypeError:
        raise ValueError(f"frozen constant {name!r}: unknown type {t!r}") from None
    if dtype is not None and (dtype.name != t or dtype.kind not in _SCALAR_KINDS):
        raise ValueError(f"frozen constant {name!r}: unknown type {t!r}")
    if dtype is not None and dtype.kind == "c":
        return dtype.type(z)
    if t == "int" or dtype.kind in "biu":
        if not (isinstance(v, str) and v.lstrip("-").isdigit()):
            raise ValueError(f"frozen constant {name!r}: {v!r} is not an integer")
        value = int(v)
        if dtype is not None and dtype.kind == "b":
            return dtype.type(bool(value))
        return value if dtype is None else dtype.type(value)
    if dtype.kind == "f":
        return dtype.type(_float(v, name))
    raise ValueError(f"frozen constant {name!r}: unknown type {t!r}")


def check_entry(g):
    """Refuse a frozen entry whose names or values are not what deploy writes."""
    _identifier(g.get("name"), "name")
    kind = g.get("kind")
    if kind in ("module", "import"):
        _identifier(g.get("module"), "module", dotted=True)
        if kind == "import":
            _identifier(g.get("attr"), "attribute")
    elif kind == "const":
        const_value(g)
    elif kind == "function":
        source = g.get("source")
        if not isinstance(source, str):
            raise ValueError(f"frozen helper {g.get('name')!r}: no source")
        check_helper_source(source, g["name"], "frozen ")
        for nested in g.get("frozen", []):
            check_entry(nested)
    else:
        raise ValueError(f"frozen global {g.get('name')!r}: unknown kind {kind!r}")
