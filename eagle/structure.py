"""What runs a plan's samples: the ``Structure`` every structure is.

A structure either runs a plan's partitions in this process through an engine (``HostTeam``,
``DeviceKernel``: ``eagle.local``), or distributes shares of the samples to other processes,
each of which runs its share through an inner structure (``RankPartition``: ``eagle.mpi``,
``eagle_dask.DaskPartition``).  Where a kernel may be placed is the placement table in
``eagle.plan``.

A new structure subclasses ``Structure``, sets ``name`` and the flags below, implements
``execute`` (and ``run_range`` if it can run a rank's share), and is made once, as a
module-level singleton whose name is ``public_name`` (it pickles by that name).
"""
from __future__ import annotations

from .bind import bind


class Structure:
    """What runs a plan's samples.  Subclasses are singletons (``HostTeam``, ``DeviceKernel``...)."""

    name = "structure"
    #: the module-level name of the singleton (it pickles as a reference to it)
    public_name = None
    #: outputs cross processes: the structure splits samples over ranks or workers, each running an
    #: inner structure, and gathers float64, C-contiguous outputs through the host
    crosses_processes = False
    #: runs on a GPU and takes ``device=``
    uses_device = False
    #: where a run's settings go, said when the structure is called like a class
    settings_hint = "a plan's own settings (npartitions=, partitions=, inner=) go to plan()"

    def bind(self, plan, planes, device):
        """Validate a run's arguments (see ``eagle.bind.bind``)."""
        return bind(plan.plugin, planes, gathered=self.crosses_processes)

    def __repr__(self):
        return f"eagle.exec.{self.public_name}"

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self!r} is a structure already, not a class to call: pass it without "
                        f"parentheses, plan(plugin, structure={self!r}); {self.settings_hint}")

    def __reduce__(self):
        return self.public_name

    def check_plan(self, plan):
        """Refusals this structure adds at plan time."""

    def until_done_state(self, plan, planes):
        """Where ``run_until_done`` keeps the state of a run of ``planes`` on this structure:
        ``None`` for numpy planes in the driver (``eagle.until_done.NumpyState``)."""
        return None

    def result(self, plan, bound, rows):
        """What ``Plan.run`` returns: the outputs of ``bound`` and the cells folded from ``rows``
        (``Plan.result``); a structure whose runs return something else overrides it."""
        return plan.result(bound, rows)

    def execute(self, plan, bound, device):
        """Run every sample of ``bound``; write output planes in place; return cells' row partials."""
        raise NotImplementedError(f"{type(self).__name__} does not implement execute()")

    def run_range(self, plugin, values, start, stop, po=0, device=None):
        """Run samples ``[start, stop)`` as an inner structure (one rank's or worker's share)."""
        raise NotImplementedError(f"{self!r} cannot run a rank's share")
