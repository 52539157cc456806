"""Python's parser, under one lock: every kernel, helper and generated function eagle reads.

``ast.parse`` is not safe from two threads at once before CPython 3.12: the conversion of the
parse tree into ``ast`` objects counts its recursion depth in state shared by every thread, and a
thread switch in the middle (a garbage collection running Python code) makes another thread's
parse fail with ``SystemError: AST constructor recursion depth mismatch`` (python/cpython#106905).
eagle parses kernels at decoration, at deploy and when it generates a host module -- possibly in
several threads (a thread team, a Dask worker) -- so every parse goes through ``parse``.  The rest
of ``ast`` that eagle uses (walking, building nodes, ``ast.unparse``) is plain Python.
"""
from __future__ import annotations

import ast
import threading

#: held while a source is parsed (re-entrant: a parse never waits for itself)
LOCK = threading.RLock()


def parse(source: str, mode: str = "exec"):
    """``ast.parse(source, mode=mode)``, one thread at a time."""
    with LOCK:
        return ast.parse(source, mode=mode)


def literal_trips(call, any_range_alias: bool = False):
    """The trip count of ``range(<int literals>)``, or None (not such a call).  With
    ``any_range_alias`` any function name ending in ``range`` counts (the rewritten body's own
    aliases of ``range``)."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
        return None
    name = call.func.id
    if not (name.endswith("range") if any_range_alias else name == "range"):
        return None
    vals = []
    for a in call.args:
        if isinstance(a, ast.UnaryOp) and isinstance(a.op, ast.USub) and isinstance(a.operand, ast.Constant):
            a = ast.Constant(-a.operand.value)
        if not (isinstance(a, ast.Constant) and type(a.value) is int):
            return None
        vals.append(a.value)
    try:
        return len(range(*vals))
    except (TypeError, ValueError):
        return None
