"""Mutants of the Dask tables, lazy arrays and Params, progress and eagle.random, each with the
tests that must fail when it is applied (run by scripts/mutants.py)."""

_STORE = "tests/test_table_store.py"

MUTANTS = [
    {"name": "table fingerprint ignores dtype",
     "path": "eagle_dask/tables.py",
     "old": "return v.dtype.str, v.shape, np.ascontiguousarray(flat).tobytes()",
     "new": "return v.shape, np.ascontiguousarray(flat).tobytes()",
     "tests": [f"{_STORE}::test_same_bytes_other_dtype_is_its_own_table"],
     "timeout": 300},
    {"name": "table fingerprint and byte compare ignore shape",
     "path": "eagle_dask/tables.py",
     "old": "return v.dtype.str, v.shape, np.ascontiguousarray(flat).tobytes()",
     "new": "return v.dtype.str, np.ascontiguousarray(flat).tobytes()",
     "tests": [f"{_STORE}::test_same_bytes_other_shape_is_its_own_table"],
     "timeout": 300},
    {"name": "lazy Param read on the worker unchecked (10.5 from an int64 dask array truncated)",
     "path": "eagle_dask/lazy_params.py",
     "old": "out[name] = param_value(rules, name, {name: np.asarray(v)})",
     "new": "out[name] = np.asarray(v)[()]",
     "tests": ["tests/test_lazy_params.py::test_lazy_param_whose_dtype_lies_is_refused_as_host_team_refuses_its_value"],
     "timeout": 300},
]
