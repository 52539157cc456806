"""What the vectorised host loop's generated code calls at run time (``eagle.simd``).

``wide`` asks LLVM for 512-bit vectors in one function, ``noinline`` keeps a function out of its
callers, ``dtype_of`` and ``same_type`` type the tile arrays of the state; ``refusal`` reads the
reason a vectorised loop did not type from numba's error (``MARK`` starts eagle's own reasons).
"""
from __future__ import annotations

from numba import types
from numba.core.errors import RequireLiteralValue, TypingError
from numba.extending import intrinsic

MARK = "eagle:"                         # starts the message of a refusal raised while typing

@intrinsic
def wide(typingctx):
    """Ask LLVM for 512-bit vectors in the function that calls this (its own function attribute,
    "prefer-vector-width"; llvmlite's attribute set knows no string attributes, hence set.add)."""
    def codegen(context, builder, signature, args):
        set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()
    return types.none(), codegen


@intrinsic
def noinline(typingctx):
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


__all__ = ["MARK", "wide", "noinline", "dtype_of", "same_type", "refusal"]
