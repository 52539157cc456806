"""The lazy mode of ``DaskPartition``: planes that are dask arrays, and never pass through the driver.

When any plane of a run is a dask array, ``Plan.run`` builds a graph and returns at once:

* every ``Out`` and ``Mutable`` as a new float64 dask array, chunked along samples as the run
  cut them; every cell as a 0-d float64 dask array; a single output bare, several as a dict by
  name (``plan_result``).  Nothing is written in place: a caller's numpy plane is read, never
  modified, and a dask array is never mutated (a block copies every plane it writes);
* **blocks** are neighbouring chunks coalesced: the cuts are the union of the dask planes'
  chunk boundaries along samples (for a kernel with cells rounded down to multiples of
  ``eagle.rows.ROW``, so that no row of a cell has two blocks), and neighbouring pieces are
  joined until a block holds at least ``min_block`` samples (``block_sizes``;
  ``DaskPartition.on(client, min_block=...)``, default ``MIN_BLOCK``); the output planes are
  chunked as the blocks;
* one task per block (``eagle_dask.task.run_chunk``), which the scheduler runs where its
  chunks lie: it takes the chunks that overlap its samples and cuts its block from them itself
  (no rechunk in the graph, whatever the chunks); it returns the output blocks and the cells'
  row partials -- a single output plane without cells *is* the task's result, and a kernel
  with cells only returns its row partials, so a run adds 1 task per block (plus one per
  output plane and one for the row partials when there are several) and one per cell; a
  block reads a chunk it needs less than half of through a sliver (``_overlapping``), so that
  only those samples travel to it;
* each cell is one final task (``eagle_dask.task.fold_cell``) folding the blocks' row
  partials in row order with ``eagle.rows.fold`` -- the bits of one process, whatever the
  chunking (dask's own reductions fold in a tree that depends on the chunks);
* numpy planes beside dask planes: a sliceable one is cut into the blocks' slices, any other
  is one key of the graph -- each sent once;
* a plane the body reads at other samples (``plugin.sliceable`` leaves it out) is assembled
  whole on the cluster (``rechunk`` to one chunk) and given to every block; so is a dask
  ``Table`` (all its axes in one chunk), and a numpy table is one key of the graph
  (``eagle_dask.lazy_tables``);
* vector planes ``(n, w)`` are cut along samples only: a dask plane chunked along its second
  axis is refused, as is a numpy ``Out`` (it would be written in place);
* a Param may be a 0-d dask array (a cell of an earlier lazy run, ``x.mean()``): every block
  depends on it and reads its value on the worker (``eagle_dask.lazy_params``).

A lost worker is dask's to recover: every block is recomputed from the graph's lineage, and
a block is a pure function of its chunks, so the bits are the same.  A kernel that raises
does so when the graph is computed, naming the kernel, the sample and the block.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

from eagle.bind import (GATHERED_DTYPE, check_names, check_output, check_plane, is_array, not_gatherable,
                        param_value, sample_count)
from eagle.roles import OUTPUT_KINDS, TABLE
from eagle.rows import ROW

from . import keys
from .lazy_params import lazy_param, params_arg
from .lazy_tables import bind_table, table_key
from .task import PluginRef, fold_cell, pick_block, pick_rows, run_chunk, take_rows

#: samples a lazy block holds at least (neighbouring chunks are joined up to it), chosen from the
#: costs ``benchmarks.dask_speed`` shows: at 2^16 samples a task's fixed cost (~1 ms) is a few
#: percent of the cheapest kernels' block, and a plane of 10^6 samples still gives 15 blocks
MIN_BLOCK = 2 ** 16


def is_dask(v) -> bool:
    """A dask collection (without importing dask when nothing has)."""
    base = sys.modules.get("dask.base")
    return base is not None and base.is_dask_collection(v)


def has_dask(planes: dict) -> bool:
    return any(is_dask(v) for v in planes.values())


@dataclass
class LazyBound:
    """A lazy run's validated arguments; ``results`` is filled by ``execute_lazy``."""
    n: int
    values: dict                      # name -> dask array, numpy plane or Param value
    outputs: list                     # Out/Mutable names, argument order
    supplied: set
    lazy_by: str                      # the first dask plane (named in refusals)
    results: dict = field(default_factory=dict)
    lazy = True


# -- binding -----------------------------------------------------------------------------------
def _param(plugin, name, planes):
    v = planes.get(name)
    if is_dask(v):
        return lazy_param(plugin, name, v)          # read on the worker (eagle_dask.lazy_params)
    return param_value(plugin, name, planes)


def _plane(plugin, role, name, v, lazy_by):
    """One plane of a lazy run, checked: a dask array (chunked along samples only) or numpy."""
    import dask.array as da
    k, kind = plugin.name, role.kind
    if is_dask(v):
        if not isinstance(v, da.Array):
            raise TypeError(f"{kind} plane {name!r} of kernel {k!r} is a {type(v).__name__}: a plane is a dask "
                            "array (from a dask DataFrame or Series: .to_dask_array(lengths=True))")
    elif kind == "Out":
        what = "numpy array" if isinstance(v, np.ndarray) else type(v).__name__
        raise ValueError(f"output plane {name!r} of kernel {k!r} is a {what}, and this run is lazy "
                         f"(plane {lazy_by!r} is a dask array): nothing is written in place; leave {name!r} out "
                         "and use the dask array the run returns (or pass a dask array as its initial values)")
    elif kind == "In" and not is_array(v):
        v = np.asarray(v)
    elif not is_array(v):
        raise TypeError(f"{kind} plane {name!r} of kernel {k!r} must be an array (numpy or dask), "
                        f"not a {type(v).__name__}")
    check_plane(plugin, name, v)
    if isinstance(v, da.Array):
        if any(c != c for dim in v.chunks for c in dim):
            raise ValueError(f"plane {name!r} of kernel {k!r} has unknown chunk sizes (shape {v.shape}): "
                             f"eagle cuts blocks along samples by them; call {name}.compute_chunk_sizes() first")
        if v.ndim == 2 and len(v.chunks[1]) > 1:
            raise ValueError(f"plane {name!r} of kernel {k!r} is chunked along its second axis (chunks "
                             f"{v.chunks[1]}): a vector plane is cut along samples only; rechunk it with "
                             f"{name}.rechunk({{1: -1}})")
    if kind in OUTPUT_KINDS:
        if isinstance(v, da.Array):
            check_output(k, name, role, v, gathered=True)
        elif v.dtype != GATHERED_DTYPE:                 # a numpy Mutable: read, never written
            raise not_gatherable(f"output plane {name!r} of kernel {k!r} is", v.dtype)
    return v


def bind_lazy(plan, planes: dict, device=None) -> LazyBound:
    """Check a lazy run's arguments against the kernel's roles (the words of ``eagle.bind.bind``,
    and the lazy mode's own refusals); nothing is computed."""
    plugin = plan.plugin
    k = plugin.name
    check_names(plugin, planes)
    lazy_by = next(name for name, v in planes.items() if is_dask(v))
    values, n_of = {}, {}
    for role, name in plugin.arg_spec:
        kind = role.kind
        if kind == "Cell":
            continue
        if kind == "Param":
            values[name] = _param(plugin, name, planes)
            continue
        if kind == TABLE:
            values[name] = bind_table(plugin, name, planes)
            continue
        if name not in planes:
            if kind != "Out":
                raise TypeError(f"kernel {k!r} is missing plane {name!r} ({kind})")
            continue
        v = _plane(plugin, role, name, planes[name], lazy_by)
        values[name] = v
        n_of[name] = int(v.shape[0])
    n = sample_count(k, n_of)
    outputs = plugin.names(*OUTPUT_KINDS)
    return LazyBound(n=n, values=values, outputs=outputs,
                     supplied={name for name in outputs if name in planes}, lazy_by=lazy_by)


# -- the graph ---------------------------------------------------------------------------------
def block_sizes(n: int, chunkings, rows: bool, min_block: int = 1) -> tuple:
    """The blocks of a lazy run: the union of the planes' chunk boundaries along samples (for a
    kernel with cells, each rounded down to a multiple of ``ROW``), neighbours joined until a
    block holds at least ``min_block`` samples (a short tail joins the last block); ``(0,)``
    when ``n == 0``."""
    cuts = {0, n}
    for chunks in chunkings:
        at = 0
        for c in chunks:
            at += int(c)
            cuts.add(at)
    if rows:
        cuts = {c // ROW * ROW for c in cuts if c < n} | {n}
    cuts = sorted(c for c in cuts if 0 <= c <= n)
    if min_block > 1 and len(cuts) > 2:
        kept = [0]
        for c in cuts[1:-1]:
            if c - kept[-1] >= min_block:
                kept.append(c)
        if len(kept) > 1 and n - kept[-1] < min_block:
            kept.pop()
        cuts = kept + [n]
    sizes = tuple(b - a for a, b in zip(cuts, cuts[1:]) if b > a)
    return sizes or (0,)


def _chunk_key(arr, b):
    return (arr.name, b) + ((0,) if arr.ndim == 2 else ())


def _whole(v, n, key, layer, table):
    """The key every block reads a whole plane (or a table) from, and the dask array it comes
    from (None for a numpy plane: put in ``layer`` under ``key``, sent once)."""
    if table:
        return table_key(v, key, layer)                 # one chunk, or one key of the graph
    if not is_dask(v):
        layer[key] = v
        return key, None
    if len(v.chunks[0]) != 1:
        v = v.rechunk((n,) + v.chunks[1:])               # assembled on the cluster
    return _chunk_key(v, 0), v


def _overlapping(arr, a, b, sliver=None, layer=None):
    """The keys a block reads samples ``[a, b)`` of ``arr`` from, and where ``[a, b)`` lies in
    their concatenation: (keys, lo, hi).  Each chunk the block reads at least half of is read
    whole; with a ``sliver`` name, the part it reads of any other chunk is a task of its own in
    ``layer`` (``task.take_rows``, key ``(sliver, chunk, first sample)``), which runs where that
    chunk lies, so that only those samples travel to the block's worker: a block whose cuts are
    rounded to whole rows of a cell reads a few samples of its neighbours' chunks."""
    sizes = arr.chunks[0]
    ends = np.cumsum(sizes)
    last = len(ends) - 1
    i0 = min(int(np.searchsorted(ends, a, side="right")), last)
    i1 = max(i0, min(int(np.searchsorted(ends, b - 1, side="right")), last)) if b > a else i0
    first = int(ends[i0] - sizes[i0])
    got, lo = [], a - first
    for i in range(i0, i1 + 1):
        start = int(ends[i] - sizes[i])
        s, e = max(a, start), min(b, int(ends[i]))
        if sliver is None or i0 == i1 or 2 * (e - s) >= sizes[i]:
            got.append(_chunk_key(arr, i))
            continue
        key = (sliver, i, s - start)
        layer[key] = (take_rows, _chunk_key(arr, i), s - start, e - start)
        got.append(key)
        if i == i0:
            lo = 0
    return got, lo, lo + b - a


def _min_block(plan) -> int:
    value = getattr(plan.structure, "min_block", None)
    return MIN_BLOCK if value is None else value


def _block_inputs(plugin, planes, n, starts, token, layer, tables):
    """Every block's planes as graph keys: (sliced names, per block [(chunk keys, lo, hi)], whole
    names, whole keys, the dask arrays the graph depends on).  A sliced dask plane is given as the
    chunks that overlap the block (the task cuts it); a numpy one as the block's slice; a plane
    read at other samples whole (a dask one rechunked to one chunk, on the cluster), and so is a
    table (``eagle_dask.lazy_tables``)."""
    blocks = range(len(starts) - 1)
    inputs, sliced_names, sliced_keys, whole_names, whole_keys = [], [], [[] for _ in blocks], [], []
    for name, v in planes.items():
        if name in plugin.sliceable:
            sliced_names.append(name)
            if is_dask(v):
                inputs.append(v)
                sliver = keys.name(plugin.name, "in", f"{token}-{name}-sliver")
                for b in blocks:
                    chunk_keys, lo, hi = _overlapping(v, starts[b], starts[b + 1], sliver, layer)
                    sliced_keys[b].append([chunk_keys, lo, hi])
            else:
                for b in blocks:
                    key = (keys.name(plugin.name, "in", f"{token}-{name}"), b)
                    layer[key] = np.ascontiguousarray(v[starts[b]:starts[b + 1]])
                    sliced_keys[b].append([[key], 0, starts[b + 1] - starts[b]])
        else:
            whole_names.append(name)
            key, v = _whole(v, n, keys.name(plugin.name, "in", f"{token}-{name}"), layer, name in tables)
            if v is not None:
                inputs.append(v)
            whole_keys.append(key)
    return sliced_names, sliced_keys, whole_names, whole_keys, inputs


def _width(plugin, bound, role, name):
    if role.kind == "Out":
        return role.width
    v = bound.values[name]
    return v.shape[1] if v.ndim == 2 else None


def execute_lazy(plan, bound: LazyBound, device) -> dict:
    """Build the run's graph; put its dask arrays in ``bound.results``.  Returns no row
    partials: the cells are folded by tasks of the graph."""
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    plugin, n = plan.plugin, bound.n
    fresh = {name: (plugin.roles[name].width, plugin.roles[name].out_dtype)
             for name in plugin.names("Out") if name not in bound.supplied}
    planes = {k: v for k, v in bound.values.items()
              if (is_dask(v) or is_array(v)) and k not in fresh and plugin.roles[k].kind != "Param"}
    params = {k: v for k, v in bound.values.items() if k not in planes}
    params_in, lazy_params = params_arg(plugin, params)      # 0-d dask Params: read on the worker
    tables = set(plugin.names(TABLE))
    sizes = block_sizes(n, [v.chunks[0] for k, v in planes.items() if is_dask(v) and k not in tables],
                        rows=bool(plugin.cells), min_block=_min_block(plan))
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
    blocks = range(len(sizes))
    # a digit first: distributed's key_split never reads the token as a word of the task's name
    token = "0" + tokenize(plugin.key, plan.inner.name, device, sizes, params, fresh,
                           {k: (v.name if is_dask(v) else v) for k, v in planes.items()})
    run_name = keys.name(plugin.name, "block", token)
    layer, ref = {}, PluginRef(plugin)
    sliced_names, sliced_keys, whole_names, whole_keys, inputs = _block_inputs(
        plugin, planes, n, starts, token, layer, tables)
    inputs = [*lazy_params, *inputs]
    outs = [(role, name) for role, name in plugin.arg_spec if name in bound.outputs]
    # what a block's task returns: the one output plane itself, the row partials alone, or both
    result = (outs[0][1] if len(outs) == 1 and not plugin.cells else "rows" if not outs else "all")
    tail = () if result in ("all", "rows") or _width(plugin, bound, *outs[0]) is None else (0,)
    rows_name = run_name if result == "rows" else keys.name(plugin.name, "rows", token)
    for b in blocks:
        # the plugin rides in each task (pickled once with the graph): a key of its own would be a
        # dependency the scheduler weighs against the chunks when it places a block
        layer[(run_name, b) + tail] = (run_chunk, ref, plan.inner, b, starts[b], starts[b + 1], n,
                                       tuple(sliced_names), sliced_keys[b], tuple(whole_names),
                                       list(whole_keys), params_in, fresh, device, result)
        if plugin.cells and result == "all":
            layer[(rows_name, b)] = (pick_rows, (run_name, b))
    graph = HighLevelGraph.from_collections(run_name, layer, dependencies=inputs)
    if result not in ("all", "rows"):
        width = _width(plugin, bound, *outs[0])
        chunks = (sizes,) if width is None else (sizes, (width,))
        bound.results = {result: da.Array(graph, run_name, chunks=chunks, dtype=np.float64,
                                          meta=np.empty((0,) * len(chunks), dtype=np.float64))}
        return {}
    runs = da.Array(graph, run_name, chunks=((1,) * len(sizes),), dtype=object, meta=np.empty((0,), dtype=object))
    bound.results = _result_arrays(plugin, bound, outs, token, rows_name, sizes, runs)
    return {}


def _result_arrays(plugin, bound, outs, token, rows_name, sizes, runs):
    """The output planes (a pick of each block's result) and the cells (one fold each)."""
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph
    blocks = range(len(sizes))
    results = {}
    for role, name in outs:
        width = _width(plugin, bound, role, name)
        out_name = keys.name(plugin.name, "out", f"{token}-{name}")
        tail = () if width is None else (0,)
        graph = HighLevelGraph.from_collections(
            out_name, {(out_name, b) + tail: (pick_block, (runs.name, b), name) for b in blocks},
            dependencies=[runs])
        chunks = (sizes,) if width is None else (sizes, (width,))
        results[name] = da.Array(graph, out_name, chunks=chunks, dtype=np.float64,
                                 meta=np.empty((0,) * len(chunks), dtype=np.float64))
    for role, name in plugin.arg_spec:
        if role.kind == "Cell":
            cell_name = keys.name(plugin.name, "cell", f"{token}-{name}")
            graph = HighLevelGraph.from_collections(
                cell_name, {(cell_name,): (fold_cell, role.op, name, [(rows_name, b) for b in blocks])},
                dependencies=[runs])
            results[name] = da.Array(graph, cell_name, chunks=(), dtype=np.float64,
                                     meta=np.empty((), dtype=np.float64))
    return results


def plan_result(plan, bound, rows):
    """What a run on DaskPartition returns (``Structure.result``): a lazy run's dask arrays (a
    single output bare, several as a dict by name, cells where they stand), else ``Plan.result``."""
    if not getattr(bound, "lazy", False):
        return plan.result(bound, rows)
    out = {name: bound.results[name] for role, name in plan.plugin.arg_spec if name in bound.results}
    if len(out) == 1:
        return next(iter(out.values()))
    return out
