"""Helper functions a kernel calls: compiled from their source with the kernel.

A helper defined in ``__main__`` or a notebook cannot be imported on a worker, and a plain Python
function is not compiled yet, so eagle freezes the helper's source (and its own globals) into the
plugin.  The plugin then runs in a process that never saw the defining script, on the host and on
the device (numba's CUDA simulator), with the same bits as numpy.
"""
import math
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import In, Out
from eagle import plan as eplan
from tests.kernels import same_bits

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DEFINE_IN_MAIN = '''
import math, pickle, sys
import numpy as np
import numba
import eagle, eagle.exec as eexec
from eagle import In, Out, Param
from eagle import plan as eplan

HALF = 0.5

def clip(v, hi):                      # a plain Python function
    return v if v < hi else hi

@numba.njit
def damp(v, g):                       # a numba function calling another helper
    return clip(v * (1.0 - g * HALF), 3.0)

@eagle.kernel
def shaped(i, x: In, g: Param, y: Out):
    y[i] = damp(math.sqrt(x[i]), g) + HALF

if __name__ == "__main__":
    out = sys.argv[1]
    plugin = eagle.deploy(shaped)
    x = np.linspace(0.0, 40.0, 77)
    y = eplan.plan(plugin, structure=eexec.HostTeam, npartitions=3).run(x=x, g=0.25)
    np.save(f"{out}/main.npy", y)
    with open(f"{out}/plugin.pickle", "wb") as f:
        pickle.dump(plugin, f)
    plugin.save(f"{out}/artifact")
'''

RUN_ELSEWHERE = '''
import pickle, sys
import numpy as np
import eagle, eagle.exec as eexec
from eagle import plan as eplan

out, structure = sys.argv[1], sys.argv[2]
with open(f"{out}/plugin.pickle", "rb") as f:
    plugin = pickle.load(f)
loaded = eagle.load(f"{out}/artifact")
x = np.linspace(0.0, 40.0, 77)
st = eexec.DeviceKernel if structure == "device" else eexec.HostTeam
np.save(f"{out}/{structure}.npy", eplan.plan(plugin, structure=st, npartitions=2).run(x=x, g=0.25))
np.save(f"{out}/{structure}-loaded.npy", eplan.plan(loaded, structure=st).run(x=x, g=0.25))
'''


def _reference():
    x = np.linspace(0.0, 40.0, 77)
    damped = np.sqrt(x) * (1.0 - 0.25 * 0.5)
    return np.minimum(damped, 3.0) + 0.5


def _python(script, *args, env=None, cwd=None):
    e = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
    done = subprocess.run([sys.executable, str(script), *map(str, args)], env=e, cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_helpers_from_main_travel_with_the_plugin(tmp_path):
    maker, user = tmp_path / "maker", tmp_path / "user"
    maker.mkdir()
    user.mkdir()
    (maker / "define.py").write_text(DEFINE_IN_MAIN)
    (user / "elsewhere.py").write_text(RUN_ELSEWHERE)
    _python(maker / "define.py", tmp_path, cwd=maker)
    _python(user / "elsewhere.py", tmp_path, "host", cwd=user)
    _python(user / "elsewhere.py", tmp_path, "device", env={"NUMBA_ENABLE_CUDASIM": "1"}, cwd=user)
    ref = _reference()
    for name in ("main", "host", "host-loaded", "device", "device-loaded"):
        assert same_bits(np.load(tmp_path / f"{name}.npy"), ref), name


SCALE = 3.0


def _scaled(v):
    return v * SCALE


def test_helper_globals_are_frozen_and_a_clash_is_refused():
    @eagle.kernel
    def uses(i, x: In, y: Out):
        y[i] = _scaled(x[i])

    plugin = eagle.deploy(uses)
    entry = next(g for g in plugin.frozen if g["name"] == "_scaled")
    assert entry["kind"] == "function" and entry["frozen"][0]["name"] == "SCALE"
    x = np.arange(5.0)
    assert same_bits(eplan.plan(pickle.loads(pickle.dumps(plugin)), structure=eexec.HostTeam).run(x=x), x * 3.0)

    SCALE = 2.0   # noqa: N806 - the kernel's SCALE (a closure) is not the helper's (a global)

    @eagle.kernel
    def clashes(i, x: In, y: Out):
        y[i] = _scaled(x[i]) + SCALE

    with pytest.raises(ValueError, match=r"kernel 'clashes': 'SCALE' means different things in the kernel "
                                         r"and in a helper"):
        eagle.deploy(clashes)


square = lambda v: v * v  # noqa: E731 - the refusal under test


def test_a_lambda_helper_is_refused_by_name():
    @eagle.kernel
    def calls_lambda(i, x: In, y: Out):
        y[i] = square(x[i])

    with pytest.raises(ValueError, match=r"kernel 'calls_lambda' calls 'square', which is not a plain function"):
        eagle.deploy(calls_lambda)


def test_an_importable_numba_helper_is_imported_not_copied():
    @eagle.kernel
    def uses_math(i, x: In, y: Out):
        y[i] = math.hypot(x[i], 1.0)

    frozen = eagle.deploy(uses_math).frozen
    assert frozen == [{"name": "math", "kind": "module", "module": "math"}]
