"""Mutation check: break the code on purpose, one edit at a time, and see a test fail.

Every ``scripts/mutants/*.py`` holds ``MUTANTS``, a list of dicts::

    {"name": "what the edit breaks", "path": "eagle_dask/tables.py",
     "old": "source text that occurs exactly once in that file", "new": "the mutated text",
     "tests": ["tests/test_table.py::test_..."], "timeout": 300}

For each mutant the script applies the edit in a scratch copy of the tree (the checkout itself is
never touched), runs its tests there with a time bound, and reports:

- ``killed``: a test failed;
- ``killed (timeout)``: the tests ran past ``timeout`` seconds (a hang counts as caught, and is
  said so); ``killed (signal N)``: the mutant crashed the test process;
- ``SURVIVED``: every test passed with the mutant in place;
- ``stale``: the ``old`` text is not in the file exactly once (the code moved on: update the entry).

Usage::

    python scripts/mutants.py                 # every mutant
    python scripts/mutants.py -k tables       # those whose file or name contains "tables"
    python scripts/mutants.py --list

It exits non-zero when a mutant survived or an entry is stale.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LISTS = ROOT / "scripts" / "mutants"
COPIED = ("eagle", "eagle_dask", "tests", "examples", "benchmarks", "scripts", "docs", "notebooks",
          "pyproject.toml", "README.md")


def load_mutants(selector: str | None = None) -> list[dict]:
    """Every mutant listed under scripts/mutants/, each with the list file it came from."""
    found = []
    for path in sorted(LISTS.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"_mutants_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for m in getattr(mod, "MUTANTS", []):
            m = dict(m, source=path.name)
            if selector is None or selector in m["path"] or selector in m["name"] or selector in path.stem:
                found.append(m)
    return found


def problem(m: dict) -> str | None:
    """Why a mutant cannot be applied (its text gone or ambiguous), or None."""
    text = (ROOT / m["path"]).read_text()
    count = text.count(m["old"])
    if count != 1:
        return f"'old' occurs {count} times in {m['path']}"
    if m["old"] == m["new"]:
        return "'new' equals 'old'"
    return None


def scratch_tree() -> Path:
    """A copy of the tree the mutants are applied in (the checkout stays as it is)."""
    top = Path(tempfile.mkdtemp(prefix="eagle-mutants-"))
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, top / name, ignore=shutil.ignore_patterns("__pycache__", "_build"))
        elif src.exists():
            shutil.copy2(src, top / name)
    return top


def run_tests(top: Path, tests: list[str], timeout: float) -> tuple[str, float, str]:
    """Run ``tests`` in ``top`` (its packages first on the path), bounded by ``timeout`` seconds."""
    env = dict(os.environ, PYTHONPATH=str(top), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=top, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return "killed (timeout)", time.monotonic() - t0, out
    rc = proc.returncode
    if rc < 0:                          # the mutant crashed the test process: caught, said so
        verdict = f"killed (signal {-rc})"
    elif rc in (0, 1):
        verdict = "SURVIVED" if rc == 0 else "killed"
    else:                               # 2-5: interrupted, internal error, usage, no tests
        verdict = f"error (pytest exit {rc})"
    return verdict, time.monotonic() - t0, out


def kill_leftovers(top: Path):
    """End every process still running from the scratch tree (an MPI job a test started in a
    session of its own outlives the test's process group)."""
    try:
        import psutil
    except ImportError:
        return
    for proc in psutil.process_iter(["pid", "cwd", "cmdline", "environ"]):
        try:
            here = (proc.info["cwd"] or "").startswith(str(top))
            path = (proc.info["environ"] or {}).get("PYTHONPATH", "").startswith(str(top))
            if (here or path) and proc.pid != os.getpid():
                proc.kill()
        except (psutil.Error, OSError):
            pass


def check(m: dict, top: Path) -> tuple[str, float, str]:
    """Apply one mutant in ``top``, run its tests, put the file back."""
    target = top / m["path"]
    original = target.read_text()
    target.write_text(original.replace(m["old"], m["new"], 1))
    try:
        return run_tests(top, m["tests"], m.get("timeout", 300))
    finally:
        kill_leftovers(top)
        target.write_text(original)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", dest="selector", help="only mutants whose file, name or list contains this")
    ap.add_argument("--list", action="store_true", help="list the mutants and stop")
    ap.add_argument("-v", action="store_true", help="print the end of each mutant's test output")
    args = ap.parse_args(argv)
    mutants = load_mutants(args.selector)
    if args.list:
        for m in mutants:
            print(f"{m['path']}: {m['name']}  [{', '.join(m['tests'])}]")
        return 0
    bad = 0
    top = scratch_tree()
    try:
        for m in mutants:
            why = problem(m)
            if why:
                verdict, secs, out = "stale", 0.0, why
            else:
                verdict, secs, out = check(m, top)
            if not verdict.startswith("killed"):
                bad += 1
            print(f"{verdict:18} {secs:6.1f} s  {m['path']}: {m['name']}", flush=True)
            if args.v:
                print(out[-3000:])
    finally:
        shutil.rmtree(top, ignore_errors=True)
    print(f"{len(mutants) - bad} of {len(mutants)} mutants killed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
