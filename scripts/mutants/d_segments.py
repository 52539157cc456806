"""Mutants of the shared-memory segments' checks, the cancel watcher, the host team's wait mark,
the xarray outputs' coordinates and the transposed DataArray's message."""

T = "tests/test_segment_attack.py::"

MUTANTS = [
    {"name": "shm: a segment opened by name follows a symbolic link (O_NOFOLLOW dropped)",
     "path": "eagle_dask/shm.py",
     "old": "fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)",
     "new": "fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)",
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
    {"name": "shm: a segment's size not checked (the mapping runs past the file)",
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
