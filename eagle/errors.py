"""Errors raised inside a kernel body, re-raised with where they happened."""
from __future__ import annotations


def kernel_error(plugin_name: str, exc: BaseException, where: str) -> BaseException:
    """The same exception type with its message, the kernel's name and ``where`` (sample, rank...)."""
    msg = str(exc.args[0]) if len(exc.args) == 1 else (str(exc) if exc.args else type(exc).__name__)
    text = f"{msg} [kernel {plugin_name!r}, {where}]"
    try:
        new = type(exc)(text)
    except Exception:
        new = RuntimeError(f"{type(exc).__name__}: {text}")
    new.__cause__ = exc
    new.eagle_kernel = plugin_name
    return new
