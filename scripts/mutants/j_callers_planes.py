"""Mutants of what a numpy-mode run does to the caller's planes: written only once every block has
finished (a run that raises leaves them as they were), their pages asked for on the memory thread
while the inputs are placed; and a lazy block's copies of the planes it writes, populated first; the driver's copies cut in two
between its thread and a second one (``eagle.memory_thread``)."""

FAULTS = "tests/test_dask_faults.py::test_a_kernel_error_in_one_block_leaves_the_callers_planes_as_they_were"
PAGES = "tests/test_dask_arena.py::test_the_callers_output_planes_are_populated_while_the_blocks_run"
PREFAULT = "tests/test_prefault.py::"
MEMORY_THREAD = "tests/test_memory_thread.py"

MUTANTS = [
    {"name": "a block that came as a message written into the caller's planes at once",
     "path": "eagle_dask/eager.py",
     "old": "        self._put(b.part, {k: v for k, v in out.items() if k not in supplied})",
     "new": "        self._put(b.part, out)",
     "tests": [FAULTS + "[messages]"], "timeout": 300},
    {"name": "the blocks' messages never written into the caller's planes",
     "path": "eagle_dask/eager.py",
     "old": "            self._write()                       # every block finished",
     "new": "            pass                                # every block finished",
     "tests": ["tests/test_dask_shm.py::test_shared_memory_off_takes_the_messages"], "timeout": 300},
    {"name": "the blocks of the caller's planes dropped, not kept for the end",
     "path": "eagle_dask/eager.py",
     "old": "        self.outs[b.rank] = (b.part, {k: v for k, v in out.items() if k in supplied})",
     "new": "        self.outs[b.rank] = (b.part, {})",
     "tests": ["tests/test_dask_shm.py::test_shared_memory_off_takes_the_messages"], "timeout": 300},
    {"name": "the pages of the inputs asked for, not the outputs'",
     "path": "eagle_dask/eager.py",
     "old": "                                  if k in bound.outputs and isinstance(v, np.ndarray))",
     "new": "                                  if k not in bound.outputs and isinstance(v, np.ndarray))",
     "tests": [PAGES], "timeout": 300},
    {"name": "the pages asked for once the blocks have finished",
     "path": "eagle_dask/eager.py",
     "old": "            pages = populate_soon(v for k, v in bound.values.items()       # on the memory thread, as they run\n"
            "                                  if k in bound.outputs and isinstance(v, np.ndarray))\n"
            "            self._supervise()\n",
     "new": "            self._supervise()\n"
            "            pages = populate_soon(v for k, v in bound.values.items()       # on the memory thread, as they run\n"
            "                                  if k in bound.outputs and isinstance(v, np.ndarray))\n",
     "tests": [PAGES], "timeout": 300},
    {"name": "populate_soon on the caller's thread",
     "path": "eagle/prefault.py",
     "old": "    return soon(lambda: sum(bool(populate(a)) for a in arrays))",
     "new": "    done = concurrent.futures.Future()\n    done.set_result(sum(bool(populate(a)) for a in arrays))\n"
            "    return done",
     "tests": [PREFAULT + "test_populate_soon_faults_the_pages_in_on_another_thread"], "timeout": 120},
    {"name": "a lazy block's copy filled before its pages are asked for",
     "path": "eagle_dask/task.py",
     "old": "    populate(out)\n    np.copyto(out, v)",
     "new": "    np.copyto(out, v)\n    populate(out)",
     "tests": [PREFAULT + "test_a_lazy_blocks_copy_of_an_output_plane_is_populated_then_filled"], "timeout": 120},
    {"name": "the memory thread's half never copied",
     "path": "eagle/memory_thread.py",
     "old": "    fut = soon(lambda: _copy(first))",
     "new": "    fut = soon(lambda: None)",
     "tests": [MEMORY_THREAD], "timeout": 120},
    {"name": "a busy memory thread's half left to it",
     "path": "eagle/memory_thread.py",
     "old": "    if fut.cancel():\n        _copy(first)\n    else:\n        _wait(fut, bound)",
     "new": "    _wait(fut, bound)",
     "tests": [MEMORY_THREAD], "timeout": 120},
    {"name": "a busy memory thread's half taken back and not copied",
     "path": "eagle/memory_thread.py",
     "old": "    if fut.cancel():\n        _copy(first)\n",
     "new": "    if fut.cancel():\n        pass\n",
     "tests": [MEMORY_THREAD], "timeout": 120},
    {"name": "the memory thread's half not waited for when the caller's raised",
     "path": "eagle/memory_thread.py",
     "old": "        if not fut.cancel():\n            concurrent.futures.wait([fut], timeout=bound)\n        raise",
     "new": "        raise",
     "tests": [MEMORY_THREAD], "timeout": 120},
    {"name": "the memory thread's error dropped",
     "path": "eagle/memory_thread.py",
     "old": "            \"swapping, or was stopped)\")\n    fut.result()",
     "new": "            \"swapping, or was stopped)\")",
     "tests": [MEMORY_THREAD], "timeout": 120},
    {"name": "the driver's copies on its own thread alone",
     "path": "eagle/memory_thread.py",
     "old": "    if sum(int(dst.nbytes) for dst, _ in pairs) < SPLIT_FROM:",
     "new": "    if True:",
     "tests": [MEMORY_THREAD], "timeout": 120},
]
