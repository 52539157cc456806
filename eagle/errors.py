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


#: numba's detail kept below eagle's line of a typing error: at most this many lines and characters
DETAIL_LINES = 12
DETAIL_CHARS = 900


def compile_error(plugin_name: str, exc: BaseException, arguments: str, line: int | None) -> TypeError:
    """A TypeError for a kernel numba cannot compile for these arguments: eagle's line (the kernel,
    the user's line, the arguments' types and numba's first words), then, indented below it, the
    rest of numba's own account up to its first ``During:``/``File`` line -- for a missing
    implementation, the signature it tried and the candidates it rejected -- bounded to
    ``DETAIL_LINES`` lines and ``DETAIL_CHARS`` characters (numba's full text is the cause)."""
    text = [t.rstrip() for t in str(exc).splitlines() if t.strip()]
    first = next((k for k, t in enumerate(text) if not t.strip().startswith(("Failed in", "During:"))), 0)
    said = re.sub(r"\s+", " ", text[first].strip())[:300] if text else ""
    where = f", line {line}" if line else ""
    detail = _detail(text[first + 1:])
    new = TypeError(f"kernel {plugin_name!r}{where} cannot be compiled for the arguments given ({arguments}): "
                    f"numba says: {said}" + "".join("\n    " + t for t in detail))
    new.__cause__ = exc
    new.eagle_kernel = plugin_name
    return new


def _detail(lines: list[str]) -> list[str]:
    """numba's lines after its first, up to its first ``During:`` or ``File`` line, bounded."""
    kept, size = [], 0
    for t in lines:
        t = t.strip()
        if t.startswith(("During:", "File ", "Failed in")):
            break
        t = t[:200]
        if len(kept) == DETAIL_LINES or size + len(t) > DETAIL_CHARS:
            kept.append("... (numba's whole message is this error's __cause__)")
            break
        kept.append(t)
        size += len(t)
    return kept
