"""Errors of a kernel: raised inside its body (re-raised with where they happened), or met when
numba compiles it for the arguments given."""
from __future__ import annotations

import re


def message(exc: BaseException) -> str:
    """An exception's message, as its single argument gives it ("" when it has none)."""
    return str(exc.args[0]) if len(exc.args) == 1 else str(exc)


def retyped(kind: type, text: str) -> BaseException:
    """An exception of type ``kind`` with ``text``, or a RuntimeError naming ``kind`` when that type
    cannot be built from one message."""
    try:
        new = kind(text)
        if isinstance(new, BaseException):
            return new
    except Exception:  # noqa: BLE001 - a constructor that wants other arguments
        pass
    return RuntimeError(f"{kind.__qualname__}: {text}")


def kernel_error(plugin_name: str, exc: BaseException, where: str) -> BaseException:
    """The same exception type with its message, the kernel's name and ``where`` (sample, rank...)."""
    text = f"{message(exc) or type(exc).__name__} [kernel {plugin_name!r}, {where}]"
    new = retyped(type(exc), text)
    new.__cause__ = exc
    new.eagle_kernel = plugin_name
    return new


def with_place(exc: BaseException, plugin_name: str, where: str) -> BaseException:
    """``exc`` with ``where`` added to the places a kernel error already names (a sample, then a
    rank or a worker); any other exception becomes a kernel error at ``where``."""
    text = message(exc)
    if getattr(exc, "eagle_kernel", None) != plugin_name or not text.endswith("]"):
        return kernel_error(plugin_name, exc, where)
    new = retyped(type(exc), f"{text[:-1]}, {where}]")
    new.eagle_kernel = plugin_name
    return new


def compile_error(plugin_name: str, exc: BaseException, arguments: str, line: int | None) -> TypeError:
    """A short TypeError for a kernel numba cannot compile for these arguments: the kernel, the
    user's line, the arguments' types and numba's own first words (its full text is the cause)."""
    text = [t.strip() for t in str(exc).splitlines() if t.strip()]
    said = next((t for t in text if not t.startswith(("Failed in", "During:"))), text[0] if text else "")
    said = re.sub(r"\s+", " ", said)[:300]
    where = f", line {line}" if line else ""
    new = TypeError(f"kernel {plugin_name!r}{where} cannot be compiled for the arguments given ({arguments}): "
                    f"numba says: {said}")
    new.__cause__ = exc
    new.eagle_kernel = plugin_name
    return new
