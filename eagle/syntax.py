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
