"""No stale compiled code: a warm disk cache never runs code older than the sources it came from.

numba keys its disk cache by one function's own file, so a kernel whose generated module calls
an imported ``@numba.njit`` helper, or eagle's own ``row_partial``, would keep the old machine
code after that helper is edited.  Each test runs a fresh interpreter against a warm
``EAGLE_CACHE_DIR``, edits a source the generated code depends on, and runs again.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = """
import json, sys
import numpy as np
import eagle, eagle.exec as eexec
from eagle import In, Out, Cell
from eagle import plan as eplan
from scaling import scaled

@eagle.kernel
def through_helper(i, x: In, y: Out, total: Cell["sum"]):
    y[i] = scaled(x[i])
    total[i] = x[i]

out = eplan.plan(eagle.deploy(through_helper), structure=eexec.HostTeam).run(x=np.ones(100))
print(json.dumps({"y0": float(out["y"][0]), "total": float(out["total"])}))
"""


def _write(path, text):
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    st = os.stat(path)                     # a later mtime even on a coarse clock
    os.utime(path, (st.st_atime + 5, st.st_mtime + 5))


def _run(tmp_path, cache, pythonpath):
    env = dict(os.environ, EAGLE_CACHE_DIR=str(cache), PYTHONPATH=os.pathsep.join(pythonpath))
    done = subprocess.run([sys.executable, str(tmp_path / "job.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _helpers(tmp_path, factor, inner_offset):
    _write(tmp_path / "scaling.py", f"""
        import numba
        from offsets import offset

        @numba.njit
        def scaled(v):
            return {factor} * v + offset()
        """)
    _write(tmp_path / "offsets.py", f"""
        import numba

        @numba.njit
        def offset():
            return {inner_offset}
        """)


def test_an_edited_imported_helper_is_recompiled(tmp_path):
    cache = tmp_path / "cache"
    _write(tmp_path / "job.py", SCRIPT)
    _helpers(tmp_path, "2.0", "0.0")
    path = [str(tmp_path), REPO]
    assert _run(tmp_path, cache, path)["y0"] == 2.0
    assert _run(tmp_path, cache, path)["y0"] == 2.0            # warm cache, same sources
    _helpers(tmp_path, "3.0", "0.0")
    assert _run(tmp_path, cache, path)["y0"] == 3.0            # the helper itself was edited
    _helpers(tmp_path, "3.0", "0.5")
    assert _run(tmp_path, cache, path)["y0"] == 3.5            # what the helper calls was edited


def test_edited_eagle_runtime_is_recompiled(tmp_path):
    """A copy of eagle whose row fold is edited (each row partial starts at 1 instead of 0)."""
    cache = tmp_path / "cache"
    copy = tmp_path / "site"
    shutil.copytree(os.path.join(REPO, "eagle"), copy / "eagle",
                    ignore=shutil.ignore_patterns("__pycache__"))
    _write(tmp_path / "job.py", SCRIPT)
    _helpers(tmp_path, "2.0", "0.0")
    path = [str(tmp_path), str(copy)]
    assert _run(tmp_path, cache, path)["total"] == 100.0
    rows = copy / "eagle" / "rows.py"
    text = rows.read_text()
    old = '''    """Fold ``buf[:count]`` (one row's contributions) in ascending order."""
    s, c = ident, 0.0'''
    assert old in text
    _write(rows, text.replace(old, old.replace("s, c = ident, 0.0", "s, c = ident + 1.0, 0.0")))
    got = _run(tmp_path, cache, path)["total"]
    assert got == 100.0 + np.ceil(100 / 32)                     # 4 rows, each one more
