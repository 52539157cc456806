"""Mutants the several-hosts tests (tests/test_hosts.py, the bed of scripts/hosts_local.sh up 4) kill."""
T = "tests/test_hosts.py::"
MUTANTS = [
    {"name": "host id without the host name: every host of one machine's namespaces looks like the driver's",
     "path": "eagle_dask/shm.py",
     "old": '    return "|".join((socket.gethostname(), *_machine_and_boot()))',
     "new": '    return "|".join(_machine_and_boot())',
     "tests": [T + "test_same_bits_across_hosts_in_numpy_and_lazy_mode[2-worker-hosts]",
               T + "test_a_worker_on_the_drivers_host_maps_segments_and_one_elsewhere_never_does"],
     "timeout": 300},
    {"name": "every worker taken for one on the driver's host",
     "path": "eagle_dask/shm.py",
     "old": "return {a for a in addresses if known.get(a) == mine}",
     "new": "return set(addresses)",
     "tests": [T + "test_same_bits_across_hosts_in_numpy_and_lazy_mode[2-worker-hosts]",
               T + "test_a_worker_on_the_drivers_host_maps_segments_and_one_elsewhere_never_does"],
     "timeout": 300},
    {"name": "no worker taken for one on the driver's host (shared memory never used)",
     "path": "eagle_dask/shm.py",
     "old": "return {a for a in addresses if known.get(a) == mine}",
     "new": "return set()",
     "tests": [T + "test_a_worker_on_the_drivers_host_maps_segments_and_one_elsewhere_never_does"],
     "timeout": 300},
]
