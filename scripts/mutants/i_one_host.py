"""Mutants of a numpy-mode run on one host: the blocks submitted in one message, the planes placed
while they travel (the lease slot's write lock, the blocks' wait), a rerun of a shared-memory block
through the messages (an earlier try may still write into its regions), a block taken for done from
its flag in the arena, not its task's report."""

ARENA = "tests/test_dask_arena.py::"
WAITS = ARENA + "test_a_block_sent_before_its_planes_are_placed_waits_for_them"
BOUND = ARENA + "test_a_block_waits_for_the_planes_within_the_runs_timeout"
TAKEN = ARENA + "test_a_block_waiting_for_planes_sees_its_lease_taken_while_the_slot_is_locked"
SLOT = ARENA + "test_a_lease_slot_an_earlier_block_checks_is_not_handed_out"
STALE = "tests/test_dask_faults.py::test_a_hung_block_that_goes_on_while_its_rerun_runs_changes_nothing"
PIN = "tests/test_pinned.py::"
FRAME = "tests/test_dask_submit.py::test_a_runs_blocks_go_to_the_scheduler_in_one_frame"
DONE = "tests/test_dask_done.py::"

MUTANTS = [
    {"name": "a block does not wait for the planes to be placed",
     "path": "eagle_dask/region_locks.py",
     "old": "    while not _request(fd, fcntl.F_RDLCK, start, length):",
     "new": "    while False:",
     "tests": [WAITS], "timeout": 300},
    {"name": "the lease slot not write-locked while the planes are copied",
     "path": "eagle_dask/arena.py",
     "old": "            if region_locks.placing(self.fd, 8 * self.slots[i], 8):",
     "new": "            if True:",
     "tests": [WAITS, SLOT], "timeout": 300},
    {"name": "a waiting block does not look at its lease (waits out the bound)",
     "path": "eagle_dask/region_locks.py",
     "old": "        if not current():\n            return False\n",
     "new": "",
     "tests": [TAKEN], "timeout": 300},
    {"name": "no bound on the wait for the planes",
     "path": "eagle_dask/region_locks.py",
     "old": "        if time.monotonic() > deadline:",
     "new": "        if False:",
     "tests": [BOUND], "timeout": 120},
    {"name": "a slot an earlier block checks handed out anyway (its lock not asked)",
     "path": "eagle_dask/arena.py",
     "old": "        for i in range(len(self.slots) - 1, -1, -1):\n            if region_locks.placing(",
     "new": "        for i in range(len(self.slots) - 1, -1, -1):\n            if not region_locks.placing(",
     "tests": [SLOT, WAITS], "timeout": 300},
    {"name": "planes made after the run's submission left unplaced (a late block waits out the timeout)",
     "path": "eagle_dask/shared_run.py",
     "old": "        self.place_later = False     # planes made after this (a block sent later) are placed at once\n",
     "new": "",
     "tests": [ARENA + "test_planes_placed_first_for_a_block_sent_after_the_runs_submission"], "timeout": 300},
    {"name": "the planes never placed by a run",
     "path": "eagle_dask/eager.py",
     "old": "            self.shared.place()                 # while the blocks travel; they wait for it to read\n",
     "new": "",
     "tests": [FRAME], "timeout": 400},
    {"name": "a run's blocks submitted one by one",
     "path": "eagle_dask/eager.py",
     "old": "        self.client.sync(submit_all)\n",
     "new": "        for b, args, kwargs in calls:\n            b.future = self.client.submit(*args, **kwargs)\n"
            "        if release_held:\n            Held.release_after_submit(self.client)\n",
     "tests": [FRAME], "timeout": 300},
    {"name": "a rerun of a shared-memory block in its regions again, its share restored (as before)",
     "path": "eagle_dask/eager.py",
     "old": "        b.remote = True\n",
     "new": "        for name in run.sliced.keys() & run.shared.views.keys():\n"
            "            view = run.shared.views[name]\n"
            "            view[b.part.base:b.part.stop] = run.bound.values[name][b.part.base:b.part.stop]\n"
            "        if run.shared.started is not None:\n"
            "            run.shared.started[1][b.part.base] = 0\n",
     "tests": [STALE], "timeout": 600},
    {"name": "the arena registered again at every block",
     "path": "eagle_dask/pinned.py",
     "old": "        if known is not None and known[0] == seg:",
     "new": "        if False:",
     "tests": [PIN + "test_an_arena_is_registered_once_per_device_and_replaced_by_the_next"], "timeout": 120},
    {"name": "a replaced arena's registration kept (its mapping never closes)",
     "path": "eagle_dask/pinned.py",
     "old": "        old = _PINNED.pop(key, None)\n",
     "new": "        old = _PINNED.pop(key, None)\n        globals().setdefault('_kept', []).append(old)\n",
     "tests": [PIN + "test_an_arena_is_registered_once_per_device_and_replaced_by_the_next"], "timeout": 120},
    {"name": "a refused registration raised into the block",
     "path": "eagle_dask/pinned.py",
     "old": "        except Exception:  # noqa: BLE001 - pageable uploads instead: slower, the same bits\n            pinned = None\n",
     "new": "        except ZeroDivisionError:\n            pinned = None\n",
     "tests": [PIN + "test_a_refused_registration_leaves_pageable_uploads"], "timeout": 120},
    {"name": "the driver waits for every task's report (the arena's done flags never looked at)",
     "path": "eagle_dask/done_watch.py",
     "old": "            early = [b for f, b in pending.items() if b.shared and f not in done and self.shared.done(b.part.base)]",
     "new": "            early = []",
     "tests": [DONE + "test_a_run_returns_when_its_blocks_are_done_in_the_arena_not_when_their_tasks_report"],
     "timeout": 300},
    {"name": "a block taken for done from its flag while it still holds its lock",
     "path": "eagle_dask/shared_run.py",
     "old": "        return bool(free)\n",
     "new": "        return True\n",
     "tests": [DONE + "test_a_block_that_says_done_but_holds_its_lock_is_not_done_yet"], "timeout": 120},
    {"name": "a block says it is done even when it failed",
     "path": "eagle_dask/task.py",
     "old": "    finally:\n        mapped.close()",
     "new": "    finally:\n        mapped.mark_done()\n        mapped.close()",
     "tests": [DONE + "test_a_block_that_fails_is_never_taken_for_done"], "timeout": 300},
    {"name": "a block does not lock its done flag",
     "path": "eagle_dask/shm.py",
     "old": "            spans.append((self.started[0].offset + start, 1))\n",
     "new": "            pass\n",
     "tests": [DONE + "test_a_block_that_says_done_but_holds_its_lock_is_not_done_yet",
               ARENA + "test_a_block_still_writing_when_its_run_ends_keeps_its_regions_from_the_next_run"],
     "timeout": 300},
]
