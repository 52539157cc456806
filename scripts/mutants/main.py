"""Mutants of the bind rules, the kernel's and the structures' call messages."""
MUTANTS = [
    {"name": "a histogram's bins counted as samples", "path": "eagle/bind.py",
     "old": "        if not is_bins(plugin, name):\n            n_of[name] = int(v.shape[0])",
     "new": "        n_of[name] = int(v.shape[0])",
     "tests": ["tests/test_histogram.py"], "timeout": 300},
    {"name": "bins also planes touched at their own sample", "path": "eagle/bind.py",
     "old": "use.index_dims == 0 and bool(use.subscripts)", "new": "bool(use.subscripts)",
     "tests": ["tests/test_histogram.py"], "timeout": 300},
    {"name": "a kernel call no longer checked against its signature", "path": "eagle/kernel.py",
     "old": "            inspect.signature(self.fn).bind(*args, **kwargs)\n",
     "new": "            pass\n",
     "tests": ["tests/test_messages.py"], "timeout": 300},
    {"name": "a structure called like a class: Python's own error", "path": "eagle/structure.py",
     "old": "    def __call__(self, *args, **kwargs):", "new": "    def _not_called(self, *args, **kwargs):",
     "tests": ["tests/test_messages.py"], "timeout": 300},
]
