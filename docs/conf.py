"""Sphinx configuration for the eagle documentation.

Build with ``make -C docs html`` (warnings are errors).  Notebooks in ``notebooks/`` render as
pages: they are copied into ``docs/notebooks/`` (generated, not committed) when the build starts.
They are committed without outputs and are not executed by the site build; CI executes them
separately with ``scripts/run_notebooks.py``.  To render executed notebooks, point
``EAGLE_EXECUTED_NOTEBOOKS`` at the directory that script wrote them to (``--out``; absolute, or
relative to the repository root); a notebook missing there is taken from ``notebooks/``.
"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

# -- notebooks as pages ---------------------------------------------------------------------
_committed = os.path.join(ROOT, "notebooks")
_executed = os.path.join(ROOT, os.environ.get("EAGLE_EXECUTED_NOTEBOOKS", ""))  # relative to the repo root
_target = os.path.join(HERE, "notebooks")
shutil.rmtree(_target, ignore_errors=True)
os.makedirs(_target)
for _name in sorted(os.listdir(_committed)):
    if _name.endswith(".ipynb"):
        _run = os.path.join(_executed, _name)
        _src = _run if os.environ.get("EAGLE_EXECUTED_NOTEBOOKS") and os.path.exists(_run) else \
            os.path.join(_committed, _name)
        shutil.copy2(_src, os.path.join(_target, _name))

# -- project --------------------------------------------------------------------------------
project = "eagle"
author = "the eagle authors"
copyright = "the eagle authors"
import eagle  # noqa: E402

release = eagle.__version__
version = release

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
master_doc = "index"

# -- MyST and notebooks ---------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "off"               # CI executes notebooks separately (scripts/run_notebooks.py)
nb_merge_streams = True
# a Dask progress bar in an executed notebook is an ipywidget, which a static page cannot show
suppress_warnings = ["mystnb.unknown_mime_type"]

# -- API reference --------------------------------------------------------------------------
# the optional back ends are imported lazily by eagle; eagle_dask needs them at import time
autodoc_mock_imports = ["dask", "distributed", "dask_mpi", "dask_cuda", "mpi4py", "cupy"]
autodoc_member_order = "bysource"
autodoc_typehints = "none"              # roles are annotations, shown in the signatures already
autodoc_default_options = {"members": True, "show-inheritance": False}

# -- HTML -----------------------------------------------------------------------------------
html_theme = "alabaster"
html_title = f"eagle {release}"
html_static_path = []
