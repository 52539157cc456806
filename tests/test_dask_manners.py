"""DaskPartition behaves as a Dask library: task names, async clients, the dashboard, a progress
bar that counts samples, closed clients named, and cancelled runs that free their workers.

Every test uses a small cluster on 127.0.0.1; results are compared with numpy references
(``tests.kernels``), never with another DaskPartition run.
"""
from __future__ import annotations

import asyncio
import re
import threading
import time
import urllib.request

import numpy as np
import pytest

pytest.importorskip("distributed")

import eagle  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from eagle.bits import same_bits  # noqa: E402
from eagle.models import oscillator  # noqa: E402
from distributed.diagnostics.plugin import SchedulerPlugin  # noqa: E402
from distributed.utils import key_split  # noqa: E402
from eagle_dask import DaskPartition  # noqa: E402
from tests import kernels as K  # noqa: E402
from tests.launch import local_client, run_in_thread  # noqa: E402


def oscillators(n, steps):
    return {"omega": np.linspace(0.5, 2.0, n), "dt": 1e-3, "steps": steps, "x": np.ones(n), "v": np.zeros(n)}


def same_as_numpy(out, ref):
    assert set(out) == set(ref), (sorted(out), sorted(ref))
    for name, want in ref.items():
        assert same_bits(np.asarray(out[name]), np.asarray(want)), name


@pytest.fixture(scope="module")
def client():
    with local_client(2) as c:
        yield c


# -- task names ------------------------------------------------------------------------------
class KeyRecorder(SchedulerPlugin):
    """Every key the scheduler moves between states (scattered data included: it is released)."""

    name = "eagle-test-keys"

    def __init__(self):
        self.keys = set()

    def transition(self, key, start, finish, *args, **kwargs):
        self.keys.add(key)


def _recorded(dask_scheduler):
    return sorted(map(str, dask_scheduler.plugins[KeyRecorder.name].keys))


def _clear(dask_scheduler):
    dask_scheduler.plugins[KeyRecorder.name].keys.clear()


def keys_of_run(client, run):
    client.run_on_scheduler(_clear)
    out = run()
    end = time.monotonic() + 10
    while time.monotonic() < end:                 # the run's futures are released within a second
        time.sleep(0.5)
        left = client.run_on_scheduler(lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks])
        if not left:
            break
    return out, client.run_on_scheduler(_recorded)


@pytest.mark.parametrize("shm", ["1", "0"])
def test_numpy_mode_keys_start_with_the_kernel_name(client, monkeypatch, shm):
    """Through shared memory (the workers share the driver's host) or through the messages
    (EAGLE_DASK_SHM=0, as for workers on other hosts, where stencil's whole plane is scattered)."""
    monkeypatch.setenv("EAGLE_DASK_SHM", shm)
    client.register_plugin(KeyRecorder(), name=KeyRecorder.name)
    groups = {}
    for name in ("oscillator", "stencil"):          # stencil reads its neighbours: its plane is sent whole
        kernel, _, reference = K.CASES[name]
        plugin = eagle.deploy(kernel)
        d = K.inputs(name, 3000)
        p = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False))
        out, keys = keys_of_run(client, lambda: p.run(**{k: (v.copy() if isinstance(v, np.ndarray) else v)
                                                         for k, v in d.items()}))
        same_as_numpy(K.as_dict(plugin, out), reference(d))
        assert keys, "the run added no task"
        left = client.run_on_scheduler(lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks])
        assert not [k for k in left if k.startswith(f"{plugin.name}-eagle-")], f"held after the run: {left}"
        prefixes = {key_split(k) for k in keys}
        assert all(pref.startswith(f"{plugin.name}-eagle-") for pref in prefixes), prefixes
        groups[name] = prefixes
    assert f"oscillator-eagle-block" in groups["oscillator"]
    # through the messages, each block's share of the sliced planes is sent to its worker on its own
    assert ("oscillator-eagle-share" in groups["oscillator"]) == (shm == "0"), groups["oscillator"]
    expected = {"stencil-eagle-block"} | ({"stencil-eagle-planes"} if shm == "0" else set())
    assert groups["stencil"] == expected, groups["stencil"]
    assert not groups["oscillator"] & groups["stencil"]


def test_lazy_mode_keys_start_with_the_kernel_name(client):
    import dask
    import dask.array as da
    kernel, _, reference = K.CASES["oscillator"]
    plugin = eagle.deploy(kernel)
    d = K.inputs("oscillator", 4096)
    lazy = {**d, "omega": da.from_array(d["omega"], chunks=1024), "x": da.from_array(d["x"], chunks=1024),
            "v": da.from_array(d["v"], chunks=1024)}
    result = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False)).run(**lazy)
    inputs = set().union(*(dict(lazy[k].__dask_graph__()) for k in ("omega", "x", "v")))
    added = {k for arr in result.values() for k in dict(arr.__dask_graph__())} - inputs
    by_kind = {}
    for k in added:
        by_kind.setdefault(key_split(k), []).append(k)
    assert all(pref.startswith("oscillator-eagle-") for pref in by_kind), sorted(by_kind)
    assert {"oscillator-eagle-block", "oscillator-eagle-rows", "oscillator-eagle-cell",
            "oscillator-eagle-out"} <= set(by_kind), sorted(by_kind)
    computed = dict(zip(result, dask.compute(*result.values())))
    same_as_numpy(computed, reference(d))


# -- async clients -----------------------------------------------------------------------------
def test_async_client_numpy_mode_returns_an_awaitable(client):
    from distributed import Client
    import dask.array as da
    kernel, _, reference = K.CASES["oscillator"]
    d = K.inputs("oscillator", 5000)

    async def main():
        async with Client(client.scheduler.address, security=client.security, asynchronous=True) as ac:
            p = eplan.plan(kernel, structure=DaskPartition.on(ac, progress=False))
            pending = p.run(**{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in d.items()})
            assert not isinstance(pending, dict), "an asynchronous client's run must not block the loop"
            out = await asyncio.wait_for(pending, 120)
            lazy = p.run(**{**d, "omega": da.from_array(d["omega"], chunks=2048),
                            "x": da.from_array(d["x"], chunks=2048), "v": da.from_array(d["v"], chunks=2048)})
            keys = list(lazy)
            futures = ac.compute([lazy[k] for k in keys])
            values = await asyncio.wait_for(ac.gather(futures), 120)
            return out, dict(zip(keys, values))

    out, lazy = asyncio.run(main())
    same_as_numpy(K.as_dict(eagle.deploy(kernel), out), reference(d))
    same_as_numpy(lazy, reference(d))


def test_a_closed_client_is_named_with_what_to_do(client):
    from distributed import Client
    other = Client(client.scheduler.address, security=client.security, set_as_default=False)
    other.close()
    p = eplan.plan(oscillator, structure=DaskPartition.on(other, progress=False))
    with pytest.raises(RuntimeError) as err:
        p.run(**oscillators(64, 1))
    msg = str(err.value)
    for words in ("kernel 'oscillator'", "is closed", "nothing was run", "DaskPartition.on(new_client)"):
        assert words in msg, msg
    assert "NoneType" not in msg


# -- the dashboard -------------------------------------------------------------------------------
def test_the_dashboard_serves_on_loopback(client):
    pytest.importorskip("bokeh")
    link = client.dashboard_link
    assert link.startswith("http://127.0.0.1:"), link
    url = re.sub(r"/status$", "", link) + "/status"
    with urllib.request.urlopen(url, timeout=30) as r:
        assert r.status == 200
        page = r.read().decode("utf-8", "replace")
    assert "bokeh" in page.lower() and "Dask needs bokeh" not in page


# -- progress by samples -----------------------------------------------------------------------
def test_the_text_bar_advances_by_samples(client, capsys):
    n = 16384
    p = eplan.plan(oscillator, structure=DaskPartition.on(client, progress=True))
    quiet = eplan.plan(oscillator, structure=DaskPartition.on(client, progress=False))
    t = time.monotonic()
    quiet.run(**oscillators(n, 200_000))
    steps = int(min(5_000_000, max(200_000, 200_000 * 4.0 / (time.monotonic() - t))))    # a run of ~4 s
    capsys.readouterr()
    t = time.monotonic()
    p.run(**oscillators(n, steps))
    seconds = time.monotonic() - t
    text = capsys.readouterr().out
    draws = [s for s in text.split("\r") if s.strip()]
    counts = [int(m.group(1)) for m in (re.search(r"(\d+)/%d samples" % n, s) for s in draws) if m]
    assert len(counts) == len(draws), draws[:3]
    assert counts[-1] == n and "100%" in draws[-1] and text.endswith("\n"), draws[-1]
    assert text.count("\n") == 1, "the bar is one line, redrawn in place"
    middle = sorted(set(c for c in counts if 0 < c < n))
    assert len(draws) >= 10 and len(middle) >= 8, (seconds, counts)
    assert all(c % 32 == 0 for c in middle), "blocks report whole rows done"


# -- cancelled runs free their workers ---------------------------------------------------------
def _executing(client):
    return sum(client.run(lambda dask_worker: len(dask_worker.state.executing)).values())


@pytest.mark.parametrize("how", ["cancel", "close"])
def test_a_cancelled_run_frees_its_workers(client, how):
    from distributed import Client, Future
    long = oscillators(262_144, 3_000_000)          # about a minute of work: ~0.2 ms a sample
    driver = client if how == "cancel" else Client(client.scheduler.address, security=client.security, set_as_default=False)
    p = eplan.plan(oscillator, structure=DaskPartition.on(driver, progress=False))
    p.run(**oscillators(64, 1))
    th, box = run_in_thread(p, long)
    end = time.monotonic() + 120
    while _executing(client) < 2 and time.monotonic() < end:
        time.sleep(0.1)
    assert _executing(client) == 2, "the long run's blocks did not start"
    time.sleep(1.0)
    t = time.monotonic()
    if how == "cancel":
        running = [k for ks in client.processing().values() for k in ks if "oscillator-eagle-block" in str(k)]
        client.cancel([Future(k, client) for k in running])
    else:
        driver.close()
    while _executing(client) and time.monotonic() - t < 30:
        time.sleep(0.05)
    freed = time.monotonic() - t
    th.join(60)
    assert not th.is_alive()
    assert isinstance(box.get("error"), RuntimeError), repr(box)
    assert freed < 5.0, f"the cancelled blocks ran on for {freed:.1f} s"
    small = K.inputs("oscillator", 10_000)
    t = time.monotonic()
    out = eplan.plan(oscillator, structure=DaskPartition.on(client, progress=False)).run(
        **{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in small.items()})
    assert time.monotonic() - t < 10.0, "the next run waited behind the cancelled blocks"
    same_as_numpy(K.as_dict(eagle.deploy(oscillator), out), K.oscillator_numpy(small))


def test_a_notebook_without_widgets_keeps_one_updated_output(tmp_path):
    """The bar in a notebook without ipywidgets: one text output updated in place, so the saved
    notebook holds the last state only (not one line per update)."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    import subprocess
    import sys
    from tests.launch import ROOT, loopback_env
    n = 8192
    cells = [
        "import sys\nsys.modules['ipywidgets'] = None          # as if ipywidgets were not installed",
        "import numpy as np\nimport eagle_dask\nfrom eagle import plan as eplan\nfrom eagle.models import oscillator\n"
        "client = eagle_dask.local_cluster(n_workers=2, threads_per_worker=1)\n"
        "p = eplan.plan(oscillator, structure=eagle_dask.DaskPartition.on(client, progress=True))\n"
        "w = np.linspace(0.5, 2.0, 64)\n"
        "_ = p.run(omega=w, dt=1e-3, steps=1, x=np.ones(64), v=np.zeros(64))",
        f"w = np.linspace(0.5, 2.0, {n})\n"
        f"out = p.run(omega=w, dt=1e-3, steps=4_000_000, x=np.ones({n}), v=np.zeros({n}))",
        "client.close()",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    path = tmp_path / "bar.ipynb"
    nbformat.write(nb, str(path))
    proc = subprocess.run([sys.executable, "scripts/run_notebooks.py", str(path), "--out", str(tmp_path / "out")],
                          cwd=ROOT, env=loopback_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    done = nbformat.read(str(tmp_path / "out" / "bar.ipynb"), as_version=4)
    outputs = done.cells[2].outputs
    shown = [o for o in outputs if o.output_type == "display_data"]
    streams = [o for o in outputs if o.output_type == "stream"]
    assert len(shown) == 1 and not streams, outputs
    assert f"100% {n}/{n} samples" in shown[0].data["text/plain"], shown[0].data


def test_a_cancelled_piece_stops_within_a_poll():
    """A worker with a team of 2 threads runs a first piece of 4 x 2 whole chunks (16384 samples,
    about ten seconds here): a cancel stops it within a poll, not at the piece's end."""
    import eagle_dask
    from distributed import Future
    n, steps = 32_768, 20_000_000
    with eagle_dask.local_cluster(n_workers=1, threads_per_worker=2) as c:
        c.wait_for_workers(1, timeout=120)
        p = eplan.plan(oscillator, structure=DaskPartition.on(c, progress=False))
        p.run(**oscillators(64, 1))
        th, box = run_in_thread(p, oscillators(n, steps))
        end = time.monotonic() + 120
        while _executing(c) < 1 and time.monotonic() < end:
            time.sleep(0.1)
        assert _executing(c) == 1, "the block did not start"
        time.sleep(1.0)
        t = time.monotonic()
        running = [k for ks in c.processing().values() for k in ks if "oscillator-eagle-block" in str(k)]
        c.cancel([Future(k, c) for k in running])
        while _executing(c) and time.monotonic() - t < 60:
            time.sleep(0.05)
        freed = time.monotonic() - t
        th.join(60)
        assert not th.is_alive() and isinstance(box.get("error"), RuntimeError), repr(box)
        assert freed < 4.0, f"the cancelled piece ran on for {freed:.1f} s"
        small = K.inputs("oscillator", 10_000)
        out = p.run(**{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in small.items()})
        same_as_numpy(K.as_dict(eagle.deploy(oscillator), out), K.oscillator_numpy(small))


def test_abandoned_only_while_the_thread_waits_for_its_team():
    """The cancel watcher raises ``Abandoned`` into a task's thread only while that thread waits
    for its host team: while it does anything else (loading or compiling the kernel, holding the
    module's file lock) the exception waits, so no lock is left held; then the team stops within
    a poll."""
    import eagle.exec as eexec
    from eagle_dask.cancel import Abandoned, watching
    plan = eplan.plan(oscillator, structure=eexec.HostTeam)
    plan.run(**oscillators(64, 1))
    box = {}

    def task():
        t = time.monotonic()
        try:
            with watching(lambda: False):                # released from the start
                while time.monotonic() - t < 1.0:      # Python of its own, outside the team's wait
                    box["spins"] = box.get("spins", 0) + 1
                box["outside"] = time.monotonic() - t
                plan.run(**oscillators(4096, 300_000_000))    # minutes of work, unless stopped
            box["ended"] = "returned"
        except Abandoned:
            box["ended"] = "abandoned"
        box["seconds"] = time.monotonic() - t

    th = threading.Thread(target=task, daemon=True)
    th.start()
    th.join(60)
    assert not th.is_alive(), "the team was not stopped"
    assert box.get("outside", 0) >= 1.0, f"Abandoned was raised outside the team's wait: {box}"
    assert box["ended"] == "abandoned", box
    assert box["seconds"] < 1.0 + 5.0, box
