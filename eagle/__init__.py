"""eagle: per-sample kernels run on CPU threads, GPUs, MPI ranks and Dask workers,
bit for bit the same everywhere."""
import os as _os
import sys as _sys

__version__ = "0.1.0"

# Intel SVML vectorises math functions with results that depend on a sample's position in a
# vector; eagle's determinism promise rules it out.  Disable it before numba is imported.
if "numba" not in _sys.modules:
    _os.environ.setdefault("NUMBA_DISABLE_INTEL_SVML", "1")

from .roles import In, Out, Mutable, Param, Cell, Table  # noqa: E402
from .kernel import Kernel, kernel  # noqa: E402
from .plugin import Plugin, deploy, load, save  # noqa: E402
from . import plan, exec  # noqa: E402,F401

import numba as _numba  # noqa: E402

if getattr(_numba.config, "USING_SVML", False):
    import warnings as _warnings
    _warnings.warn("numba was imported with Intel SVML enabled before eagle: vectorised math may give "
                   "position-dependent bits; set NUMBA_DISABLE_INTEL_SVML=1 before importing numba",
                   RuntimeWarning, stacklevel=2)

__all__ = ["In", "Out", "Mutable", "Param", "Cell", "Table", "Kernel", "kernel", "Plugin", "deploy", "load", "save",
           "plan", "exec", "__version__"]
