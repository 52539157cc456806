"""Mutants of the lazy mode's road (results joined on the driver, slivers of neighbours' chunks)."""

JOIN = "tests/test_client_join.py::test_every_way_of_computing_a_lazy_result_joins_it_on_the_driver"
MIXED = "tests/test_client_join.py::test_mixed_collections_keep_their_shape_and_values"
SLIVER = "tests/test_client_join.py::test_a_block_takes_only_the_samples_it_reads_of_a_neighbours_chunk"
BLOCKS = "tests/test_dask_blocks.py::test_coalesced_blocks_same_bits_and_few_tasks"
ROAD = ("tests/test_hosts.py::"
        "test_lazy_mode_results_come_straight_to_the_driver_and_blocks_run_where_their_chunks_lie")

MUTANTS = [
    {"name": "no join on the driver (dask's finalize on a worker)",
     "path": "eagle_dask/client_join.py",
     "old": "    if not joined:\n        return None\n",
     "new": "    if True:\n        return None\n",
     "tests": [JOIN], "timeout": 300},
    {"name": "a finalize over nested lists (two axes) left on a worker",
     "path": "eagle_dask/client_join.py",
     "old": "        keys = [_block_keys(x) for x in node.args]",
     "new": "        keys = [x.key if isinstance(x, TaskRef) else None for x in node.args]",
     "tests": [MIXED], "timeout": 300},
    {"name": "the blocks returned unjoined",
     "path": "eagle_dask/client_join.py",
     "old": "    return [array_finalize(got) if",
     "new": "    return [got if",
     "tests": [JOIN, MIXED], "timeout": 300},
    {"name": "results relayed by the scheduler (not fetched direct)",
     "path": "eagle_dask/client.py",
     "old": "        direct = True if direct is None else direct\n",
     "new": "        direct = False if direct is None else direct\n",
     "tests": [ROAD], "timeout": 600},
    {"name": "no slivers: a neighbour's whole chunk read for a few samples",
     "path": "eagle_dask/arrays.py",
     "old": "        if sliver is None or i0 == i1 or 2 * (e - s) >= sizes[i]:",
     "new": "        if True:",
     "tests": [SLIVER, ROAD], "timeout": 600},
    {"name": "a sliver at a block's start read from the chunk's start",
     "path": "eagle_dask/arrays.py",
     "old": "        if i == i0:\n            lo = 0\n",
     "new": "",
     "tests": [SLIVER, BLOCKS], "timeout": 300},
    {"name": "a sliver cut one sample short",
     "path": "eagle_dask/arrays.py",
     "old": "        layer[key] = (take_rows, _chunk_key(arr, i), s - start, e - start)",
     "new": "        layer[key] = (take_rows, _chunk_key(arr, i), s - start, e - start - 1)",
     "tests": [SLIVER, BLOCKS], "timeout": 300},
]
