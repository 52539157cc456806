"""The keys of the tasks a run adds to the cluster: the kernel's name first.

Dask groups tasks by ``distributed.utils.key_split`` of their key (the words before the first
one that holds a digit or a hex token): the dashboard's task stream, its progress bars and
``distributed.progress`` show one group per prefix.  Every key a run adds starts with the
kernel's name and then says the kind of task, so ``key_split`` gives ``<kernel>-eagle-<kind>``:

* numpy mode: ``<kernel>-eagle-block-<tag>-rank<r>`` (one per rank; ``-again<k>`` when
  resubmitted), ``<kernel>-eagle-planes-<tag>`` (the whole planes scattered to every worker),
  ``<kernel>-eagle-share-<tag>-rank<r>`` (a block's share of the sliced planes, sent to its
  worker; ``-again<k>`` when sent again, ``-try<t>`` when sent to another worker);
* lazy mode: ``<kernel>-eagle-block-<token>`` (the blocks), ``<kernel>-eagle-rows-<token>``
  (their row partials), ``<kernel>-eagle-cell-<token>`` (a cell's fold),
  ``<kernel>-eagle-out-<token>`` (an output's chunks), ``<kernel>-eagle-in-<token>`` (a numpy
  plane embedded in the graph).

A kernel named with leading underscores loses them in ``key_split`` (dask strips them).
Tokens are made to hold a digit, so that ``key_split`` never reads one as a word.
"""
from __future__ import annotations

import uuid

#: the kinds of task a run adds, as they appear in its keys
KINDS = ("block", "planes", "share", "rows", "cell", "out", "in")

_BLOCK = "-eagle-block-"


def new_tag(progress: bool = False) -> str:
    """A fresh run tag: 12 hex digits, the first a digit (so never a word to ``key_split``):
    ``1`` when the run shows a bar and its blocks report their progress, else ``0``."""
    return ("1" if progress else "0") + uuid.uuid4().hex[:11]


def reports_progress(tag: str) -> bool:
    """Whether the blocks of run ``tag`` report their progress (``eagle_dask.progress``)."""
    return tag.startswith("1")


def name(kernel: str, kind: str, token: str) -> str:
    """The key (or the dask array name) of ``kind`` tasks of a run of ``kernel``."""
    if kind not in KINDS:
        raise ValueError(f"eagle_dask.keys.name: kind={kind!r} is not one of {KINDS}")
    return f"{kernel}-eagle-{kind}-{token}"


def block_key(kernel: str, tag: str, rank: int, attempt: int = 0) -> str:
    """The key of rank ``rank``'s block in the numpy-mode run ``tag`` (its ``attempt``-th resubmission)."""
    return name(kernel, "block", tag) + f"-rank{rank}" + (f"-again{attempt}" if attempt else "")


def share_key(kernel: str, tag: str, rank: int, attempt: int = 0, target: int = 0) -> str:
    """The key of rank ``rank``'s share of the sliced planes in run ``tag``, sent for the block's
    ``attempt``-th submission to its ``target``-th choice of worker."""
    return (name(kernel, "share", tag) + f"-rank{rank}" + (f"-again{attempt}" if attempt else "")
            + (f"-try{target}" if target else ""))


def block_rank(key: str) -> int | None:
    """The rank of a numpy-mode block's key."""
    try:
        return int(key.rsplit("-rank", 1)[1].split("-", 1)[0])
    except (IndexError, ValueError):
        return None


def kernel_of(key) -> str | None:
    """The kernel whose run added task ``key`` (a string or a dask array chunk's tuple), or None
    for a key no eagle run made."""
    if isinstance(key, tuple) and key:
        key = key[0]
    if not isinstance(key, str) or "-eagle-" not in key:
        return None
    kernel, rest = key.split("-eagle-", 1)
    return kernel if rest.split("-", 1)[0] in KINDS and kernel else None


def run_tag(key) -> str | None:
    """The run tag of a numpy-mode block's key (None for any other key)."""
    if not isinstance(key, str) or _BLOCK not in key:
        return None
    rest = key.split(_BLOCK, 1)[1]
    tag = rest.split("-", 1)[0]
    return tag if "-rank" in rest else None
