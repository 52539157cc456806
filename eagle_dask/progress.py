"""distributed's progress bar for a run's blocks: when it is shown, and how."""
from __future__ import annotations

import os
import sys
import threading


def progress_wanted(progress):
    """``progress`` if given; else in a notebook or a terminal, unless ``EAGLE_DASK_PROGRESS`` is off."""
    if progress is not None:
        return bool(progress)
    if os.environ.get("EAGLE_DASK_PROGRESS", "").strip().lower() in ("0", "off", "no", "false"):
        return False
    from distributed.utils import is_kernel
    return is_kernel() or sys.stdout.isatty()


def show_progress(futures):
    """distributed's progress bar: a widget in a notebook, a text bar (in a thread) in a terminal."""
    from distributed import progress
    from distributed.utils import is_kernel
    if is_kernel():
        try:
            import ipywidgets  # noqa: F401 - the notebook bar is a widget
        except ImportError:
            pass                     # no widgets: the text bar below prints into the cell
        else:
            from IPython.display import display
            display(progress(futures, multi=False))
            return None
    t = threading.Thread(target=progress, args=(futures,), kwargs={"notebook": False, "multi": False},
                         name="eagle-dask-progress", daemon=True)
    t.start()
    return t
