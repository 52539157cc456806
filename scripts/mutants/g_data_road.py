"""Mutants of numpy mode's data road (shares straight to the worker, outputs straight back)."""

ROAD = "tests/test_hosts.py::test_numpy_mode_planes_go_straight_between_the_driver_and_the_workers"
LOST = "tests/test_dask_faults.py::test_every_worker_lost_and_restarted_gives_same_bits[sliced-messages]"
SEND = "tests/test_dask_faults.py::test_a_share_lies_on_the_worker_named_or_is_refused_within_the_bound"
KEYS = "tests/test_dask_manners.py::test_numpy_mode_keys_start_with_the_kernel_name[0]"
HUNG = ("tests/test_dask_faults.py::"
        "test_a_worker_hung_before_the_run_gets_no_share_and_the_run_ends_with_the_same_bits")
STALL = "tests/test_dask_faults.py::test_a_hung_worker_is_given_up_after_stall_timeout_with_the_same_bits[messages]"

MUTANTS = [
    {"name": "a block's share rides inside its task again (through the scheduler)",
     "path": "eagle_dask/eager.py",
     "old": "    share, address = _send_share(run, b, address)\n",
     "new": "    share = {k: np.ascontiguousarray(v[b.part.base:b.part.stop]) for k, v in run.sliced.items()}\n",
     "tests": [ROAD], "timeout": 600},
    {"name": "the outputs gathered through the scheduler",
     "path": "eagle_dask/eager.py",
     "old": "errors=\"raise\",\n                                           direct=True, callback_timeout=bound)",
     "new": "errors=\"raise\",\n                                           direct=False, callback_timeout=bound)",
     "tests": [ROAD], "timeout": 600},
    {"name": "a block's share scattered through the scheduler",
     "path": "eagle_dask/send.py",
     "old": "client.sync(_send_to, client, key, value, address, callback_timeout=timeout)",
     "new": ("client.sync(client._scatter, {key: value}, workers=[address], direct=False, hash=False, "
             "timeout=timeout, callback_timeout=timeout)"),
     "tests": [ROAD], "timeout": 600},
    {"name": "a share lost with its worker not sent again (the block's cancel taken for the user's)",
     "path": "eagle_dask/block_faults.py",
     "old": "share_lost = b.inputs is not None and lost([b.inputs])",
     "new": "share_lost = False",
     "tests": [LOST], "timeout": 600},
    {"name": "a resubmitted block reuses its old share (left on the lost or silent worker)",
     "path": "eagle_dask/eager.py",
     "old": ("    if b.inputs is not None:\n"
             "        b.inputs.release()          # the share of an earlier submission: sent anew where the block goes\n"
             "        b.inputs = None\n"),
     "new": ("    if b.inputs is not None:\n"
             "        return b.inputs, run.whole_f, run.fresh, None, address\n"),
     "tests": [LOST, STALL], "timeout": 600},
    {"name": "a share sent to another worker than the block's",
     "path": "eagle_dask/send.py",
     "old": "answer = await client.rpc(address).update_data(",
     "new": "answer = await client.rpc(min(client.scheduler_info()['workers'])).update_data(",
     "tests": [SEND], "timeout": 300},
    {"name": "a share's send not bounded by the run's timeout",
     "path": "eagle_dask/send.py",
     "old": "address, callback_timeout=timeout)",
     "new": "address, callback_timeout=60)",
     "tests": [SEND], "timeout": 300},
    {"name": "a share's failed send raised as distributed's error, not None (no other worker tried)",
     "path": "eagle_dask/send.py",
     "old": "        _forget(client, key)\n        return None\n",
     "new": "        _forget(client, key)\n        raise\n",
     "tests": [SEND], "timeout": 300},
    {"name": "a block's share rides inside its task again (no share key)",
     "path": "eagle_dask/eager.py",
     "old": "    share, address = _send_share(run, b, address)\n",
     "new": "    share = {k: np.ascontiguousarray(v[b.part.base:b.part.stop]) for k, v in run.sliced.items()}\n",
     "tests": [KEYS], "timeout": 300},
    {"name": "a finished run's futures (blocks, shares, planes) held until the next run",
     "path": "eagle_dask/eager.py",
     "old": "            del cls._by_client[client]\n        cls._release(futures)\n",
     "new": "            return\n",
     "tests": [KEYS], "timeout": 300},
    {"name": "a share's send to a hung worker waits the run's whole timeout, not stall_timeout",
     "path": "eagle_dask/eager.py",
     "old": "one = run.structure.stall_timeout + size / SLOW_SEND",
     "new": "one = timeout",
     "tests": [HUNG], "timeout": 400},
]
