"""A script that starts a local cluster must do it under ``if __name__ == "__main__":``.

distributed starts each worker as a fresh Python process that re-imports the script; without the
guard every worker runs the script's top level again, tries to start a cluster of its own, and
the user reads hundreds of lines ending in ``Nanny failed to start``.  :func:`refuse_unguarded`
says it in one message instead, before anything starts (in the script) and in each worker that
re-imports it.
"""
from __future__ import annotations

import ast


MESSAGE = ("eagle_dask.{where}() must be called under `if __name__ == \"__main__\":` in a script ({file}, "
           "line {line}): each worker process re-imports the script and would start a cluster of its own; "
           "move the call (and the runs) under that line")


def _guarded(tree, line):
    """Whether ``line`` lies inside an ``if`` whose test names ``__name__`` and ``"__main__"``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.lineno < line <= (node.end_lineno or node.lineno):
            names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
            texts = {n.value for n in ast.walk(node.test) if isinstance(n, ast.Constant)}
            if "__name__" in names and "__main__" in texts and any(
                    n.lineno <= line <= (n.end_lineno or n.lineno) for n in node.body):
                return True
    return False


def refuse_unguarded(caller, where):
    """Raise eagle's message when ``caller`` (the frame calling ``where``) is a script's top level
    outside the ``__main__`` guard, or a worker process re-importing such a script."""
    name = caller.f_globals.get("__name__")
    file = caller.f_globals.get("__file__") or "?"
    if name == "__mp_main__":
        raise RuntimeError(MESSAGE.format(where=where, file=file, line=caller.f_lineno))
    if name != "__main__" or caller.f_code.co_name != "<module>" or not str(file).endswith(".py"):
        return
    try:
        with open(file, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return                                   # nothing to read: distributed says what happens
    if not _guarded(tree, caller.f_lineno):
        raise RuntimeError(MESSAGE.format(where=where, file=file, line=caller.f_lineno))
