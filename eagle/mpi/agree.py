"""How ranks agree on an outcome: one rank's error reaches every rank, and no rank waits.

Before the data collectives of a run the ranks exchange an ok/error status (``agree``), so a
refusal or a raising kernel on one rank is raised on every rank as the same exception type,
naming the rank, instead of leaving the others waiting in a collective.
"""
from __future__ import annotations

import importlib

from ..errors import message, retyped

def _describe(exc):
    if exc is None:
        return None
    return type(exc).__module__, type(exc).__qualname__, message(exc)


def _rebuild(desc, rank, size):
    module, qualname, msg = desc
    text = f"{msg} [rank {rank} of {size}]"
    try:
        kind = importlib.import_module(module)
        for part in qualname.split("."):
            kind = getattr(kind, part)
    except Exception:  # noqa: BLE001 - a type this rank cannot import
        kind = None
    err = retyped(kind, text) if isinstance(kind, type) and issubclass(kind, Exception) else \
        RuntimeError(f"{qualname}: {text}")
    err.eagle_rank = rank
    err.eagle_all_ranks = True
    return err


def agree(world_comm, exc, value=None):
    """Exchange every rank's status (and ``value``); raise the first rank's error on all ranks.

    Returns the list of every rank's ``value`` when no rank failed.
    """
    states = world_comm.allgather((_describe(exc), value))
    size = len(states)
    for rank, (desc, _) in enumerate(states):
        if desc is not None:
            err = _rebuild(desc, rank, size)
            raise err from exc
    return [v for _, v in states]


def on_every_rank(world_comm, step, value=lambda result: None):
    """Run ``step()`` here, then agree with every rank before anyone goes on.

    Without a communicator an error is raised as it is.  With one, every rank learns whether any
    rank failed (and raises that error, naming the rank) -- no rank is left waiting in a later
    collective.  Returns ``(result, every rank's value(result))``.
    """
    try:
        result, err = step(), None
    except Exception as e:  # noqa: BLE001 - raised on every rank by agree()
        result, err = None, e
    if world_comm is None:
        if err is not None:
            raise err
        return result, [value(result)]
    return result, agree(world_comm, err, None if err is not None else value(result))
