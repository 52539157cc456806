"""Mutants of the shared-memory segments' checks, the cancel watcher, the host team's wait mark,
the xarray outputs' coordinates and the transposed DataArray's message."""

T = "tests/test_segment_attack.py::"

MUTANTS = [
    {"name": "shm: a segment opened by name follows a symbolic link (O_NOFOLLOW dropped)",
     "path": "eagle_dask/shm.py",
     "old": "fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)",
     "new": "fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC)",
     "tests": [T + "test_a_block_starting_later_is_refused_by_name[symlink]"], "timeout": 300},
    {"name": "shm: a segment's owner not checked",
     "path": "eagle_dask/shm.py",
     "old": "    if st.st_uid != seg.uid:",
     "new": "    if False:",
     "tests": [T + "test_a_block_starting_later_is_refused_by_name[file]"], "timeout": 300},
    {"name": "shm: a segment's device and inode not checked",
     "path": "eagle_dask/shm.py",
     "old": "    if (st.st_dev, st.st_ino) != (seg.dev, seg.ino):",
     "new": "    if False:",
     "tests": [T + "test_a_hard_link_to_another_segment_is_refused"], "timeout": 300},
    {"name": "shm: a segment's mode not checked",
     "path": "eagle_dask/shm.py",
     "old": "    if stat.S_IMODE(st.st_mode) != 0o600:",
     "new": "    if False:",
     "tests": [T + "test_a_segment_changed_under_its_name_is_refused[mode]"], "timeout": 300},
    {"name": "shm: a segment's size not checked (mmap's bare ValueError instead)",
     "path": "eagle_dask/shm.py",
     "old": "    if st.st_size != seg.size:",
     "new": "    if False:",
     "tests": [T + "test_a_segment_changed_under_its_name_is_refused[size]"], "timeout": 300},
    {"name": "shm: a block's rows written by reopening the rows segment by name (the old write_rows)",
     "path": "eagle_dask/shm.py",
     "old": "            view[r0:r1] = got                   # never ``seg`` opened by name again",
     "new": "            _view(mmap.mmap(os.open(os.path.join(SHM_DIR, seg.name), os.O_RDWR), seg.size), "
            "np.float64, view.shape)[r0:r1] = got",
     "tests": [T + "test_a_running_block_writes_only_into_its_own_mappings[file]",
               T + "test_a_running_block_writes_only_into_its_own_mappings[symlink]"], "timeout": 300},
]

C = "tests/test_cancel_watch.py::"

# Left out, argued equivalent: "cancel: a fired but undelivered Abandoned not cleared on leaving"
# (``_raise_in(ident, None)`` in ``watching.__exit__`` replaced by ``pass``).  The watcher sets
# the exception while it holds ``_LOCK``; ``__exit__`` takes that lock and then calls
# ``_WATCHED.get`` and ``_raise_in`` (Python calls: CPython checks for a pending asynchronous
# exception at each) before the clear runs, so the exception is always delivered inside
# ``__exit__`` first and the clear never finds one pending: with or without it, one
# ``Abandoned`` leaves ``__exit__`` and nothing lands later (test_abandoned_delivered_while_
# leaving_is_raised_once passes both ways).  What that delivery used to break -- the slot left
# behind, the watcher never ending -- is fixed (``_fire`` frees the slot) and its mutant is below.

MUTANTS += [
    {"name": "cancel: the watcher thread ends without clearing its slot (later pieces never watched)",
     "path": "eagle_dask/cancel.py",
     "old": "                _WATCHER = None\n                return",
     "new": "                return",
     "tests": [C + "test_a_piece_after_the_watcher_ended_is_still_stopped"], "timeout": 300},
    {"name": "cancel: a fired piece's slot kept until the piece leaves (left behind when delivered in the exit)",
     "path": "eagle_dask/cancel.py",
     "old": "        del _WATCHED[ident]\n        _raise_in(ident, Abandoned)",
     "new": "        _raise_in(ident, Abandoned)",
     "tests": [C + "test_abandoned_delivered_while_leaving_is_raised_once"], "timeout": 300},
    {"name": "host: a thread stays marked waiting for its team after its wait returns",
     "path": "eagle/host.py",
     "old": "        _WAITING.discard(me)",
     "new": "        pass",
     "tests": [C + "test_not_waiting_for_the_team_once_the_wait_returned"], "timeout": 300},
]

X = "tests/test_xarray.py::"

MUTANTS += [
    {"name": "xarray_io: a coordinate carried only by a later plane dropped from the outputs",
     "path": "eagle/xarray_io.py",
     "old": "        elif labels.coord is None:\n            labels.coord = coord\n",
     "new": "",
     "tests": [X + "test_a_coordinate_carried_only_by_a_later_plane_reaches_the_outputs"], "timeout": 300},
    {"name": "xarray_io: a transposed plane not told to put its samples first",
     "path": "eagle/xarray_io.py",
     "old": "        _transposed(k, name, v, sample)\n",
     "new": "",
     "tests": [X + "test_a_transposed_plane_is_told_to_put_its_samples_first"], "timeout": 300},
]
