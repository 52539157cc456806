"""``@eagle.kernel``: a per-sample function and the roles of its arguments.

The decorator only reads the signature (so a bad annotation is reported where the kernel is
written); the body is analysed and compiled when the kernel is deployed (``eagle.deploy``).
"""
from __future__ import annotations

import ast
import inspect
import textwrap

import numpy as np

from .roles import Role, dtype_problem
from .syntax import parse


def _pickler():
    try:
        import cloudpickle
    except ImportError:               # numba ships a copy
        from numba import cloudpickle
    return cloudpickle


def read_source(fn, name):
    """The function's source, dedented, with its decorators removed, and its first line number."""
    try:
        lines, line0 = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        raise ValueError(
            f"kernel {name!r}: its source cannot be read (defined through exec, eval or an "
            "interactive prompt without a file?); eagle compiles a kernel from its source, so define "
            "it in a module, a script or a notebook cell") from None
    src = textwrap.dedent("".join(lines))
    tree = parse(src)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise TypeError(f"kernel {name!r}: @eagle.kernel decorates a plain function (def ...)")
    # keep from the `def` line on: the decorators are eagle's, not the body's
    src = "".join(src.splitlines(keepends=True)[fdef.lineno - 1:])
    return src, line0 + fdef.lineno - 1


def _failing_annotation(fn):
    """The first parameter whose (postponed, string) annotation does not evaluate."""
    raw = inspect.get_annotations(fn)
    for pname, text in raw.items():
        if not isinstance(text, str):
            continue
        try:
            eval(text, getattr(fn, "__globals__", {}))
        except Exception:
            return pname
    return None


def signature_roles(fn, name):
    """(index name, ((role, name), ...)) from a kernel's signature, refusing bad annotations."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if not params:
        raise TypeError(f"kernel {name!r}: the first parameter must be the sample index (def {name}(i, ...))")
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise TypeError(f"kernel {name!r}: parameter {p.name!r} is {p.kind.description}; "
                            "a kernel takes plain named parameters only")
    try:
        ann = inspect.get_annotations(fn, eval_str=True)
    except Exception as e:  # a string annotation that does not evaluate: name its parameter
        raise TypeError(f"kernel {name!r}: the annotation of parameter {_failing_annotation(fn)!r} could "
                        f"not be evaluated ({e})") from None
    idx = params[0].name
    if idx in ann:
        raise TypeError(f"kernel {name!r}: the first parameter {idx!r} is the sample index and takes no "
                        f"annotation (got {ann[idx]!r})")
    spec, defaults = [], {}
    for p in params[1:]:
        if p.name not in ann:
            raise TypeError(f"kernel {name!r}: parameter {p.name!r} has no role; annotate it with "
                            "In, Out, Mutable, Param or Cell[op]")
        role = ann[p.name]
        if not isinstance(role, Role):
            raise TypeError(f"kernel {name!r}: parameter {p.name!r} is annotated {role!r}, not a role "
                            "(In, Out, Mutable, Param or Cell[op])")
        if role.kind == "Cell" and role.op is None:
            raise TypeError(f"kernel {name!r}: cell {p.name!r} needs its reduction, e.g. Cell['sum']")
        check_declared_dtype(name, p.name, role)
        if p.default is not p.empty:
            if role.kind != "Param":
                raise TypeError(f"kernel {name!r}: only a Param may have a default ({p.name!r} is {role!r})")
            defaults[p.name] = p.default
        spec.append((role, p.name))
    return idx, tuple(spec), defaults


def check_declared_dtype(kname, pname, role):
    """Refuse ``Out[dtype]`` where a plane cannot hold that dtype (``roles.dtype_problem``), here
    where the kernel is written rather than at its first run."""
    problem = None if role.kind != "Out" or role.dtype is None else dtype_problem(role.dtype)
    if problem is not None:
        why, better = problem
        instead = Role("Out", width=role.width, dtype=better if better is not None else np.dtype(np.float64))
        raise TypeError(f"kernel {kname!r}: output {pname!r} is declared {role!r}{why}; declare it {instead!r}")


class Kernel:
    """A per-sample kernel: ``fn(i, *planes)`` with a role for each plane."""

    def __init__(self, fn, *, access=None, fma=False):
        self.fn = fn
        self.name = fn.__name__
        self.access = access
        self.fma = bool(fma)
        self.index_name, self.arg_spec, self.defaults = signature_roles(fn, self.name)
        self.source, self.first_line = read_source(fn, self.name)
        self.__doc__ = fn.__doc__
        self.__name__ = self.name
        self.__qualname__ = getattr(fn, "__qualname__", self.name)
        self.__module__ = getattr(fn, "__module__", None)

    def __call__(self, *args, **kwargs):
        """Calling a kernel runs its body in Python for one sample (handy for debugging):
        ``k(i, *planes)``; any other call is explained, with how to run every sample."""
        try:
            inspect.signature(self.fn).bind(*args, **kwargs)
        except TypeError as e:
            names = ", ".join(f"{n}=..." for r, n in self.arg_spec if r.kind not in ("Cell", "Out"))
            raise TypeError(
                f"kernel {self.name!r} is not called like a function ({e}): run every sample with a plan, "
                f"eagle.plan.plan(eagle.deploy({self.name}), structure=eagle.exec.HostTeam).run({names}); "
                f"{self.name}({self.index_name}, ...) with every argument runs one sample in Python") from None
        return self.fn(*args, **kwargs)

    def __repr__(self):
        args = ", ".join(f"{n}: {r!r}" for r, n in self.arg_spec)
        return f"<eagle kernel {self.name}({self.index_name}, {args})>"

    # a kernel defined in __main__ or a notebook pickles by value
    # the roles travel evaluated: with postponed annotations (``from __future__ import
    # annotations``) the function pickled by value no longer holds the names they refer to
    def __reduce__(self):
        return (_rebuild_kernel, (_pickler().dumps(self.fn), self.access, self.fma,
                                  self.source, self.first_line, (self.index_name, self.arg_spec, self.defaults)))


def _rebuild_kernel(fn_bytes, access, fma, source, first_line, signature):
    import pickle
    k = Kernel.__new__(Kernel)
    k.fn = pickle.loads(fn_bytes)
    k.name = k.fn.__name__
    k.access, k.fma = access, fma
    k.index_name, k.arg_spec, k.defaults = signature
    k.source, k.first_line = source, first_line
    k.__doc__, k.__name__ = k.fn.__doc__, k.name
    k.__qualname__ = getattr(k.fn, "__qualname__", k.name)
    k.__module__ = getattr(k.fn, "__module__", None)
    return k


def kernel(fn=None, *, access=None, fma=False):
    """Declare a per-sample kernel.

    ``@eagle.kernel`` or ``@eagle.kernel(access="cross_sample_read", fma=False)``.  ``access``
    may only widen what eagle infers from the body.  ``fma=True`` lets the host compiler fuse
    ``a*b + c`` into one multiply-add: faster, but the bits then differ from numpy's (they are
    still the same on every split, thread count and lane grouping).
    """
    if fn is None:
        return lambda f: Kernel(f, access=access, fma=fma)
    if isinstance(fn, Kernel):
        return fn
    if not callable(fn):
        raise TypeError(f"@eagle.kernel decorates a function, not {fn!r}")
    return Kernel(fn, access=access, fma=fma)
