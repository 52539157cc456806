#!/usr/bin/env python
"""Execute notebooks top to bottom on a fresh kernel; exit non-zero if any cell fails.

    python scripts/run_notebooks.py                       # every notebook in notebooks/
    python scripts/run_notebooks.py notebooks/01_quickstart.ipynb --out build/notebooks

Each notebook runs on a new ``python3`` kernel started from *this* interpreter (a kernel spec
is written to a temporary directory first on ``JUPYTER_PATH``, so another Python's ``python3``
kernel is never picked up), in a temporary working directory, with the repository root on
``PYTHONPATH``.  Nothing is written back to the repository: executed copies go to ``--out``
when it is given, and nowhere otherwise.  Needs nbclient and ipykernel (the ``docs`` extra).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL = "python3"


def kernel_spec_dir(base: str) -> str:
    """Write a ``python3`` kernel spec for this interpreter under ``base``; return ``base``."""
    spec = os.path.join(base, "kernels", KERNEL)
    os.makedirs(spec, exist_ok=True)
    with open(os.path.join(spec, "kernel.json"), "w") as f:
        json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                   "display_name": f"Python 3 ({sys.executable})", "language": "python"}, f)
    return base


def run_one(path: str, out_dir: str | None, timeout: int) -> tuple[bool, float, str]:
    """Execute one notebook; return (ok, seconds, error text)."""
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="eagle-nb-") as cwd:
        # IPC sockets in the temporary directory: the kernel opens no TCP port at all
        km = KernelManager(kernel_name=KERNEL, transport="ipc", ip=os.path.join(cwd, "kernel-ipc"))
        client = NotebookClient(nb, km=km, kernel_name=KERNEL, timeout=timeout, allow_errors=False,
                                resources={"metadata": {"path": cwd}})
        error = ""
        try:
            client.execute()
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as e:
            error = str(e)
    seconds = time.perf_counter() - start
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        nbformat.write(nb, os.path.join(out_dir, os.path.basename(path)))
    return not error, seconds, error


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", help="notebooks to run (default: every notebooks/*.ipynb)")
    ap.add_argument("--out", help="write the executed notebooks to this directory")
    ap.add_argument("--timeout", type=int, default=300, help="seconds allowed per cell (default 300)")
    args = ap.parse_args(argv)

    paths = args.notebooks or sorted(
        os.path.join(ROOT, "notebooks", f) for f in os.listdir(os.path.join(ROOT, "notebooks"))
        if f.endswith(".ipynb"))
    if not paths:
        print("no notebooks to run", file=sys.stderr)
        return 2

    specs = tempfile.mkdtemp(prefix="eagle-kernelspec-")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        p for p in (kernel_spec_dir(specs), os.environ.get("JUPYTER_PATH")) if p)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)

    failed, total = [], time.perf_counter()
    for path in paths:
        print(f"running {os.path.relpath(path)} ...", flush=True)
        ok, seconds, error = run_one(path, args.out, args.timeout)
        print(f"  {'ok    ' if ok else 'FAILED'} {seconds:6.1f} s", flush=True)
        if not ok:
            failed.append(path)
            print(error, file=sys.stderr, flush=True)
    print(f"{len(paths) - len(failed)}/{len(paths)} notebooks ran in {time.perf_counter() - total:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
