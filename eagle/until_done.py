"""``Plan.run_until_done``: step every sample until it is done or has taken ``max_steps`` steps.

The driver runs *rounds*.  Each round gathers the samples still running (not done, under
``max_steps``) into fresh contiguous planes, runs the step kernel's loop (``eagle.step_kernel``)
on them through the plan's own structure -- each sample takes at most the round's budget of
steps -- and scatters the planes back.  Finished samples stop costing, and RankPartition and
DaskPartition cut each round's shares evenly over the samples that remain.  A sample's values do
not depend on the rounds: its steps read and write only its own planes, and its index, wherever
the body uses it as a value, is its original one.

Cells: a sample's contribution is the last value it wrote to the cell (the identity if none);
the contributions are kept per sample and folded at the end over all samples in sample order
(``eagle.rows.reduce_samples``), as one process folds a normal run.

The result (``UntilDone``): ``planes`` (every Out and Mutable plane, the finish plane included),
``status`` (int8 per sample: ``FINISHED`` or ``CAPPED``), ``steps`` (int64 per sample, counted
over every run it was resumed through), ``cells`` and ``contributions``.  ``resume=result``
continues the capped samples to the same bits as one longer run.

Where the state lives: numpy planes in the driver's memory (``NumpyState``), unless the plan's
structure keeps it elsewhere -- ``Structure.until_done_state`` (DaskPartition with dask planes
keeps it on the cluster, ``eagle_dask.lazy_until_done``).  The rounds are the same either way.
"""
from __future__ import annotations

import numpy as np

from .rows import IDENTITY, is_count, reduce_samples
from .step_kernel import loop_plugin

CAPPED = np.int8(0)
FINISHED = np.int8(1)
#: run_until_done's own keywords: no kernel argument may be named so
RESERVED = ("max_steps", "resume", "round_steps", "done_plane", "device")
#: the first round's budget when ``round_steps`` is not given; each next round's is GROWTH times
#: the last (capped at max_steps): few rounds, each over far fewer samples than the last
FIRST_ROUND = 16
GROWTH = 4


class UntilDone:
    """What ``run_until_done`` returns; ``result[name]`` is a plane or a cell."""

    def __init__(self, kernel, planes, status, steps, cells, contributions, arguments):
        self.kernel = kernel
        self.planes, self.status, self.steps = planes, status, steps
        self.cells, self.contributions = cells, contributions
        self.arguments = arguments          # the In planes, Params and Tables it ran with

    def __getitem__(self, name):
        return self.planes[name] if name in self.planes else self.cells[name]

    @property
    def finished(self) -> np.ndarray:
        return self.status == FINISHED

    def __repr__(self):
        n = len(self.status)
        return (f"<eagle run_until_done {self.kernel}: {n} samples, {int(self.finished.sum())} finished, "
                f"{n - int(self.finished.sum())} capped>")


class NumpyState:
    """The state of a run held as numpy planes by the driver: what a round gathers and scatters."""

    def rounds_on(self, structure):
        """The structure the rounds run on."""
        return structure

    def begin_round(self, idx, done, steps, cap):
        """A round over the samples ``idx`` starts (they are those ``_running`` finds in the state)."""

    def check_in(self, k, name, v):
        """A plane as given, refused unless it is a numpy array."""
        if type(v) is not np.ndarray:
            raise TypeError(f"plane {name!r} of kernel {k!r} is a {type(v).__name__}: run_until_done takes numpy "
                            "planes here (dask arrays: run the plan on DaskPartition, see docs/until_done.md)")
        return v

    def plane(self, k, name, v):
        """An Out or Mutable plane's starting values, copied (the caller's array is never written)."""
        return np.array(self.check_in(k, name, v), copy=True)

    def full(self, n, width, value):
        return np.full((n,) if width is None else (n, width), value, dtype=np.float64)

    def take(self, v, idx, origin=False):
        """Samples ``idx`` of ``v`` (``origin``: ``idx`` itself, as int64), in order."""
        return idx.astype(np.int64) if origin else v[idx]

    def put(self, v, idx, new):
        """``v`` with samples ``idx`` replaced by ``new``."""
        v[idx] = new
        return v

    def settle(self, arrays):
        return arrays

    def flags(self, values):
        """``values`` (arrays of this state) as numpy arrays in the driver."""
        return values

    def status(self, done):
        return np.where(done != 0, FINISHED, CAPPED).astype(np.int8)

    def steps(self, steps):
        return steps.astype(np.int64)

    def cell(self, op, contributions):
        return reduce_samples(op, contributions)


NUMPY = NumpyState()


def _check_counts(k, max_steps, round_steps):
    for what, v in (("max_steps", max_steps), ("round_steps", round_steps)):
        if v is None and what == "round_steps":
            continue
        if not is_count(v) or v < 1:
            raise ValueError(f"kernel {k!r}: run_until_done({what}={v!r}): give a positive integer, the most "
                             f"steps {'a sample takes' if what == 'max_steps' else 'one round runs a sample'}")


def _start(plan, loop, planes, resume, st):
    """Full-size state: the arguments, the sample planes, steps, contributions and running."""
    p, k = plan.plugin, plan.plugin.name
    if resume is not None:
        if not isinstance(resume, UntilDone) or resume.kernel != k:
            raise ValueError(f"kernel {k!r}: resume= takes the result of run_until_done of this kernel, "
                             f"not {resume!r}")
        given = [n for n in planes if p.roles.get(n) is not None and p.roles[n].kind in ("Out", "Mutable")]
        if given:
            raise ValueError(f"kernel {k!r}: resume= continues from the result's planes; do not pass {given[0]!r}")
        args = {**resume.arguments, **planes}
        state = {n: st.plane(k, n, v) for n, v in resume.planes.items()}
        contrib = {n: st.plane(k, n, v) for n, v in resume.contributions.items()}
        steps = st.plane(k, "steps", resume.steps).astype(np.float64)
        return args, state, steps, contrib, st.flags([resume.status == CAPPED])[0]
    args, state = {}, {}
    for name, v in planes.items():
        role = p.roles.get(name)
        if role is not None and role.kind in ("Out", "Mutable"):
            state[name] = st.plane(k, name, v)
        elif role is not None and role.kind == "In":
            args[name] = st.check_in(k, name, v)
        else:
            args[name] = v
    n = _count(p, args, state)
    for role, name in p.arg_spec:
        if role.kind == "Out" and name not in state:
            state[name] = st.full(n, role.width, 0.0).astype(role.out_dtype)
        if role.kind == "Mutable" and name not in state:
            raise TypeError(f"kernel {k!r} is missing Mutable plane {name!r}")
    contrib = {n_: st.full(n, None, IDENTITY[op]) for n_, op in p.cells.items()}
    return args, state, st.full(n, None, 0.0), contrib, np.ones(n, dtype=bool)


def _count(p, args, state):
    lens = {name: len(v) for name, v in {**args, **state}.items()
            if p.roles.get(name) is not None and p.roles[name].kind in ("In", "Out", "Mutable")}
    if len(set(lens.values())) > 1:
        raise ValueError(f"kernel {p.name!r}: planes have different sample counts: {lens}")
    if not lens:
        raise TypeError(f"kernel {p.name!r}: run_until_done needs at least one In or Mutable plane to count "
                        "the samples")
    return next(iter(lens.values()))


def _round(loop_plan, loop, idx, args, state, steps, contrib, budget, cap, device, st):
    """One round over the samples ``idx`` (original indices, ascending), scattered back: returns the
    new ``state``, ``steps`` and ``contrib``, and which of ``idx`` run on (numpy)."""
    st.begin_round(idx, state[loop.done], steps, cap)
    sample = {n: st.take(v, idx) for n, v in args.items() if loop.plugin.roles[n].kind == "In"}
    other = {n: v for n, v in args.items() if loop.plugin.roles[n].kind != "In"}
    work = {n: st.take(v, idx) for n, v in {**state, **contrib}.items()}
    work[loop.origin] = st.take(None, idx, origin=True)
    work[loop.steps] = st.take(steps, idx)
    out = loop_plan.run(**sample, **other, **work, **{loop.budget: budget, loop.cap: cap}, device=device)
    out = {n: out[n] for n in (*state, *contrib, loop.steps)}
    new = {n: st.put(v, idx, out[n]) for n, v in {**state, **contrib, loop.steps: steps}.items()}
    new, still = st.settle((new, {"": _running(out[loop.done], out[loop.steps], cap)}))
    return {n: new[n] for n in state}, new[loop.steps], {n: new[n] for n in contrib}, st.flags([still[""]])[0]


def _running(done, steps, cap):
    """Which samples run on (numpy or dask arrays alike)."""
    return (done == 0) & (steps < cap)


def _state_of(plan, planes, resume):
    """Where this run's state lives (``NumpyState`` unless the structure keeps it elsewhere)."""
    if isinstance(resume, UntilDone):
        planes = {**resume.planes, **planes}
    return plan.structure.until_done_state(plan, planes) or NUMPY


def run_until_done(plan, make_plan, *, max_steps, resume=None, round_steps=None, done_plane="done", device=None, planes):
    """See the module docstring and ``Plan.run_until_done`` (``make_plan``: ``eagle.plan.plan``)."""
    k, done = plan.plugin.name, done_plane
    clash = [n for n in RESERVED if n in plan.plugin.roles]
    if clash:
        raise ValueError(f"kernel {k!r} has an argument named {clash[0]!r}, which run_until_done reserves for "
                         "itself; rename the argument")
    _check_counts(k, max_steps, round_steps)
    loop = loop_plugin(plan.plugin, done)
    parts = len(plan.partitions) if plan.partitions is not None else plan.npartitions
    st = _state_of(plan, planes, resume)
    loop_plan = make_plan(loop.plugin, structure=st.rounds_on(plan.structure), inner=plan.inner,
                          npartitions=1 if plan.structure.crosses_processes else parts)
    args, state, steps, contrib, running = _start(plan, loop, planes, resume, st)
    if state[done].ndim != 1:
        raise ValueError(f"kernel {k!r}: the finish plane {done!r} has shape {state[done].shape}: it holds one "
                         "value per sample, (n,)")
    running &= st.flags([_running(state[done], steps, max_steps)])[0]
    budget = round_steps or FIRST_ROUND
    first = True
    while first or running.any():
        idx = np.flatnonzero(running)
        state, steps, contrib, running[idx] = _round(loop_plan, loop, idx, args, state, steps, contrib, budget,
                                                     max_steps, device, st)
        budget = round_steps or min(budget * GROWTH, max_steps)
        first = False
    cells = {n: st.cell(plan.plugin.cells[n], v) for n, v in contrib.items()}
    return UntilDone(k, state, st.status(state[done]), st.steps(steps), cells, contrib, args)
