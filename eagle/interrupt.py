"""Stopping a host run: the stop flag, and the polls generated code makes of it.

A host tile gets a progress record (``new_progress``): the sample a raising kernel is at, and
the stop flag the engine sets when the run is interrupted (Ctrl-C, ``stop``).  The tile loop
polls the flag between samples; ``add_polls`` makes every loop of a generated function poll it
too, every ``EVERY`` iterations, so that a long or endless loop inside the body
(``for _ in range(10**12)``, ``while True``) returns within a fraction of a second of the flag
being set:

* a ``for`` over ``range`` with no ``break`` or ``else`` of its own runs in chunks of ``EVERY``
  iterations, the flag polled between chunks: the inner loop has no exit of its own, so the
  compiler treats it as the unpolled loop;
* a ``while`` counts down and, every ``EVERY`` iterations, reads the flag into a local its own
  condition tests (one exit, as before);
* any other loop counts down and returns when the flag is set.

The flag is read by ``stopped``, an atomic load the compiler never hoists out of a loop.  Loops
known to be short are not polled: a ``for`` over a small literal range (``SHORT``), and the loops
the transforms generate over a tile's samples.  A helper function the body calls is not rewritten:
a loop there is not polled.  ``benchmarks/poll.py`` measures what polls cost.
"""
from __future__ import annotations

import ast

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba import njit
from numba.extending import intrinsic


from .rows import MIN, RANGE
from .syntax import literal_trips, parse

#: the generated functions' name for the tile's progress record
PROG = "_eagle_prog"
#: the generated functions' name for the back-edge counter (every name a poll adds starts with PREFIX)
PREFIX = "_eagle_poll_"
COUNTER = "_eagle_pc"
#: the generated functions' name for "not stopped", tested by a polled ``while``
GO = "_eagle_go"
#: iterations between two loads of the stop flag (a power of two)
EVERY = 4096
#: a ``for`` over a literal range of at most this many iterations is not polled
SHORT = 16
#: the index of the stop flag in the progress record
FLAG = 1
#: the generated code imports this module under this name
MODULE = "_eagle_interrupt"


def new_progress() -> np.ndarray:
    """A tile's progress record: the sample a raising kernel is at, and the stop flag."""
    return np.array([-1, 0], dtype=np.int64)


def stop(progress) -> None:
    """Set the stop flag of a progress record (the tile returns at its next poll)."""
    progress[FLAG] = 1


@intrinsic
def stopped(typingctx, prog):
    """Whether the stop flag of ``prog`` is set: an atomic (monotonic) load, never hoisted out of a
    loop, a plain load on x86."""
    if not (isinstance(prog, types.Array) and prog.ndim == 1 and prog.dtype == types.int64):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, signature.args[0], ary,
                                       [ir.Constant(ir.IntType(64), FLAG)])
        value = builder.load_atomic(ptr, "monotonic", 8)
        return builder.icmp_signed("!=", value, ir.Constant(ir.IntType(64), 0))
    return types.boolean(prog), codegen


@njit(inline="always", nogil=True, cache=True)
def trips(lo, hi, step):
    """``len(range(lo, hi, step))``."""
    return len(range(lo, hi, step))


def stop_test() -> str:
    """The test that ends a generated tile loop when the run was interrupted."""
    return f"{MODULE}.stopped({PROG})"



def _poll_stmts(act=f"if {MODULE}.stopped({PROG}):\n        return"):
    # a count down: one fused decrement-and-branch per iteration
    return parse(f"{COUNTER} -= 1\n"
                     f"if {COUNTER} == 0:\n"
                     f"    {COUNTER} = {EVERY}\n"
                     f"    {act}\n").body


def _strip_minable(s) -> bool:
    """A ``for`` over ``range(...)`` whose body has no ``break`` of its own and no ``else``: it runs
    in chunks of ``EVERY`` iterations, polled between chunks (a loop with no exit of its own inside,
    which the compiler optimises as the unpolled one)."""
    return (isinstance(s, ast.For) and not s.orelse and isinstance(s.target, ast.Name)
            and isinstance(s.iter, ast.Call) and isinstance(s.iter.func, ast.Name) and s.iter.func.id == "range"
            and not s.iter.keywords and 1 <= len(s.iter.args) <= 3
            and not any(isinstance(n, ast.Break) for n in _own_breaks(s.body)))


def _own_breaks(body):
    for s in body:
        if isinstance(s, ast.Break):
            yield s
        elif isinstance(s, ast.If):
            yield from _own_breaks(s.body)
            yield from _own_breaks(s.orelse)
        elif isinstance(s, (ast.For, ast.While)):
            yield from _own_breaks(s.orelse)


def _strip_mined(s, k):
    """``for t in range(a, b, c): body`` as chunks of ``EVERY`` iterations, the flag polled before
    each: the same values of ``t`` in the same order (``t = a + q * c``), ``range``'s arguments
    evaluated once, in order."""
    args = [ast.unparse(a) for a in s.iter.args]
    lo, hi, st = ("0", args[0], "1") if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else "1")
    v = {n: f"{PREFIX}{n}{k}" for n in ("lo", "hi", "st", "n", "chunk", "q")}
    v["c"] = v.pop("chunk")
    pre = parse(f"{v['lo']} = {lo}\n{v['hi']} = {hi}\n{v['st']} = {st}\n"
                f"{v['n']} = {MODULE}.trips({v['lo']}, {v['hi']}, {v['st']})").body
    chunk = parse(f"for {v['c']} in {RANGE}(0, {v['n']}, {EVERY}):\n"
                  f"    if {MODULE}.stopped({PROG}):\n"
                  f"        return\n").body[0]
    s.body.insert(0, parse(f"{s.target.id} = {v['lo']} + {v['q']} * {v['st']}").body[0])
    s.target = ast.Name(v["q"], ast.Store())
    s.iter = parse(f"{RANGE}({v['c']}, {MIN}({v['c']} + {EVERY}, {v['n']}))", mode="eval").body
    chunk.body.append(s)
    return pre + [chunk]


def _replace(fdef, loop, replacement):
    """Put ``replacement`` where ``loop`` is in ``fdef``."""
    for node in ast.walk(fdef):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list) and any(b is loop for b in block):
                k = next(i for i, b in enumerate(block) if b is loop)
                block[k:k + 1] = replacement
                return


def is_poll(stmt) -> bool:
    """Whether a statement of a generated function is one ``add_polls`` inserted (an ``if`` with
    everything in it; a chunk loop, which holds the user's loop, alone)."""
    if isinstance(stmt, ast.If):
        part = stmt.test
    elif isinstance(stmt, (ast.Assign, ast.AugAssign)):
        part = stmt
    elif isinstance(stmt, ast.For):
        return isinstance(stmt.target, ast.Name) and stmt.target.id.startswith(PREFIX + "chunk")
    else:
        return False
    return any(isinstance(n, ast.Name) and (n.id.startswith(PREFIX) or n.id in (COUNTER, GO, PROG))
               for n in ast.walk(part))


def add_polls(fdef: ast.FunctionDef, bounded=frozenset()) -> ast.FunctionDef:
    """``fdef`` (changed in place) with a last parameter ``_eagle_prog`` and a poll at the head of
    every loop but a short literal range and a ``for`` whose target is in ``bounded``.

    The poll returns from the function: the caller's own poll then ends the tile.  A function that
    returns a value is not given polls (none of the generated functions that run does)."""
    fdef.args.args.append(ast.arg(PROG))
    count = 0
    out = []                                # (loop, the statements that replace it)

    def visit(stmts):
        nonlocal count
        for s in list(stmts):
            for field in ("body", "orelse"):
                if isinstance(getattr(s, field, None), list):
                    visit(getattr(s, field))
            if isinstance(s, ast.For):
                trips = literal_trips(s.iter, any_range_alias=True)
                if (isinstance(s.target, ast.Name) and s.target.id in bounded) or (
                        trips is not None and trips <= SHORT):
                    continue
            if isinstance(s, ast.While) and not s.orelse:
                # one exit: the poll clears a flag the condition tests (an ``else`` would run on a stop)
                s.test = ast.BoolOp(ast.And(), [ast.Name(GO, ast.Load()), s.test])
                s.body[:0] = _poll_stmts(f"{GO} = not {MODULE}.stopped({PROG})")
                count += 1
            elif _strip_minable(s):
                count += 1
                out.append((s, _strip_mined(s, count)))
            elif isinstance(s, (ast.For, ast.While)):
                s.body[:0] = _poll_stmts()
                count += 1

    visit(fdef.body)
    for loop, replacement in out:
        _replace(fdef, loop, replacement)
    if count:
        fdef.body[:0] = parse(f"{COUNTER} = {EVERY}\n{GO} = True").body
    return ast.fix_missing_locations(fdef)


def polled(source: str, bounded=frozenset()) -> str:
    """``add_polls`` on the one function in ``source``, as source."""
    return ast.unparse(add_polls(parse(source).body[0], bounded))
