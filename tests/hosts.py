"""The tests' view of the several-hosts bed of ``scripts/hosts_local.sh up``: an ``eagle-dask
cluster`` launched across the hosts, and a driver run on a host of its own.

Launch: ``mpiexec.hydra -launcher manual`` runs on the scheduler's host and prints one proxy
command per host; each is started inside its host's namespaces (``nsenter``), so every rank
runs on its own host, rank 0 (the scheduler) on the first.  The driver is ``python -m tests.hosts
drive SPEC``, run on its host: it joins with ``eagle_dask.connect`` (the cluster's own TLS
credentials), runs, and writes the outputs (``.npz``) and what it measured (``.json``): the bytes
every host sent onto the switch (the ``sw*`` ports of ``eagle-sw``) during each run, the plane
bytes, the bytes each host sent and received (numpy mode), the segments each worker opened and
the host ids.  Every wait is bounded.
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import shlex
import signal
import subprocess
import sys
import time

import numpy as np

from eagle.bits import as_dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIR = "/run/eagle-hosts"
SWITCH = "eagle-sw"
BIN = os.path.dirname(sys.executable)


def n_hosts() -> int:
    return len(glob.glob(os.path.join(DIR, "h*.mnt")))


def why_not(need: int = 4) -> str | None:
    """Why the several-hosts tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (the hosts are namespaces entered with nsenter)"
    if not os.path.exists("/proc/self/ns/net") or not os.path.exists("/usr/bin/nsenter"):
        return "no network namespaces or no nsenter here"
    if n_hosts() < need:
        return f"the bed has {n_hosts()} hosts, {need} needed: bash scripts/hosts_local.sh up {need}"
    if not os.path.exists(os.path.join(BIN, "mpiexec.hydra")):
        return "no mpiexec.hydra (the mpich wheel, the `mpi` extra)"
    return None


def on(host: int, args) -> list:
    """``args`` run on host ``host`` (its network, UTS and mount namespaces)."""
    return ["nsenter", f"--net=/run/netns/eagle-h{host}", f"--uts={DIR}/h{host}.uts",
            f"--mount={DIR}/h{host}.mnt", "--", *args]


def env(extra=None) -> dict:
    e = dict(os.environ)
    e["PATH"] = BIN + os.pathsep + e.get("PATH", "/usr/bin:/bin")
    e["PYTHONPATH"] = ROOT
    e["UCX_NET_DEVICES"] = "eth0"
    e["PYTHONUNBUFFERED"] = "1"
    e.update(extra or {})
    return e


def switch_bytes() -> int:
    """Bytes the hosts have sent onto the switch (received by its ports), all links together."""
    out = subprocess.run(["ip", "-n", SWITCH, "-s", "-j", "link", "show"], capture_output=True, text=True,
                         timeout=20, check=True).stdout
    return sum(link["stats64"]["rx"]["bytes"] for link in json.loads(out) if link["ifname"].startswith("sw"))


def host_bytes() -> dict:
    """``{host: bytes it sent onto the switch + bytes the switch sent it}``, per host of the bed
    (port ``sw<h>`` of the switch is host ``eagle-h<h>``'s link)."""
    out = subprocess.run(["ip", "-n", SWITCH, "-s", "-j", "link", "show"], capture_output=True, text=True,
                         timeout=20, check=True).stdout
    return {int(link["ifname"][2:]): link["stats64"]["rx"]["bytes"] + link["stats64"]["tx"]["bytes"]
            for link in json.loads(out) if link["ifname"].startswith("sw")}


def _killpg(proc):
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class Cluster:
    """``eagle-dask cluster`` with the scheduler on host ``scheduler`` and one worker on each of
    ``workers``, its scheduler file in ``workdir``; ended (every process) on exit."""

    def __init__(self, scheduler: int, workers, workdir: str, timeout: float = 90, launcher_options=()):
        self.hosts = [scheduler, *workers]
        self.launcher_options = list(launcher_options)
        self.file = os.path.join(workdir, "scheduler.json")
        self.log = os.path.join(workdir, "mpiexec.log")
        self.timeout = timeout
        self.procs = []

    def output(self) -> str:
        texts = []
        for path in sorted(glob.glob(self.log.replace(".log", "*.log"))):
            with open(path, errors="replace") as f:
                texts.append(f"--- {os.path.basename(path)}\n{f.read()[-3000:]}")
        return "\n".join(texts)

    def _start(self, host, args, log):
        f = open(log, "w")
        self.procs.append(subprocess.Popen(on(host, args), stdout=f, stderr=subprocess.STDOUT, env=env(),
                                           cwd=ROOT, start_new_session=True))
        f.close()

    def _launch_lines(self, end) -> list:
        while time.monotonic() < end:
            text = open(self.log).read()
            if "HYDRA_LAUNCH_END" in text:
                return [line.split(":", 1)[1].strip() for line in text.splitlines()
                        if line.startswith("HYDRA_LAUNCH:")]
            if self.procs[0].poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"mpiexec.hydra printed no proxy commands:\n{self.output()}")

    def __enter__(self):
        end = time.monotonic() + self.timeout
        names = ",".join(f"eagle-h{h}" for h in self.hosts)
        self._start(self.hosts[0], ["mpiexec.hydra", *self.launcher_options, "-launcher", "manual", "-hosts", names, "-n",
                                    str(len(self.hosts)), "-ppn", "1", "-iface", "eth0", "eagle-dask", "cluster",
                                    "--scheduler-file", self.file, "--interface", "eth0", "--nthreads", "1",
                                    "--no-dashboard"], self.log)
        try:
            proxies = self._launch_lines(end)
            assert len(proxies) == len(self.hosts), proxies
            for host, cmd in zip(self.hosts, proxies):     # proxy i serves the i-th host of -hosts
                self._start(host, shlex.split(cmd), self.log.replace(".log", f"-proxy-h{host}.log"))
            while not os.path.exists(self.file):
                if time.monotonic() > end or any(p.poll() is not None for p in self.procs):
                    raise RuntimeError(f"the cluster wrote no scheduler file within {self.timeout} s:\n"
                                       f"{self.output()}")
                time.sleep(0.2)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _ranks(self) -> list:
        """The processes of this cluster's ranks: on its hosts, naming its scheduler file."""
        pids = []
        for h in self.hosts:
            out = subprocess.run(["ip", "netns", "pids", f"eagle-h{h}"], capture_output=True, text=True, timeout=20)
            for pid in map(int, out.stdout.split()):
                with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
                    if self.file.encode() in f.read():
                        pids.append(pid)
        return pids

    def wait(self, timeout: float) -> bool:
        """Whether every process of the cluster ended within ``timeout`` seconds."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if all(p.poll() is not None for p in self.procs) and not self._ranks():
                return True
            time.sleep(0.2)
        return False

    def __exit__(self, *exc):
        for p in self.procs:
            _killpg(p)
        for pid in self._ranks():          # hydra's proxies start the ranks in groups of their own
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)


def start_driver(host: int, spec: dict, workdir: str) -> subprocess.Popen:
    """The driver on host ``host`` with ``spec`` (see ``_main``), started (its output a pipe)."""
    path = os.path.join(workdir, "spec.json")
    with open(path, "w") as f:
        json.dump({**spec, "workdir": workdir}, f)
    return subprocess.Popen(on(host, [sys.executable, "-m", "tests.hosts", path]), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env(), cwd=ROOT, start_new_session=True)


def read_report(workdir: str, n_runs: int) -> dict:
    """The driver's report, with the outputs of run ``i`` under ``report["outputs"][i]``."""
    with open(os.path.join(workdir, "report.json")) as f:
        report = json.load(f)
    report["outputs"] = []
    for i in range(n_runs):
        with np.load(os.path.join(workdir, f"run{i}.npz")) as z:
            report["outputs"].append({k: z[k] for k in z.files})
    return report


def drive(host: int, spec: dict, workdir: str, timeout: float = 240) -> dict:
    """Run the driver on host ``host`` with ``spec`` to its end; its report (``read_report``)."""
    proc = start_driver(host, spec, workdir)
    try:
        out = proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        _killpg(proc)
        raise AssertionError(f"the driver on eagle-h{host} did not end within {timeout} s: "
                             f"{proc.communicate()[0][-3000:]}") from None
    assert proc.returncode == 0, f"the driver on eagle-h{host} failed:\n{out[-5000:]}"
    report = read_report(workdir, len(spec["runs"]))
    report["stdout"] = out
    return report


# -- the driver (runs on its host) ---------------------------------------------------------------
def _nbytes(planes) -> int:
    return sum(v.nbytes for v in planes.values() if isinstance(v, np.ndarray) and v.ndim > 0)


def planes_of(kernels, run) -> dict:
    """The inputs of ``run`` (tests.kernels' for its kernel, ``steps`` overridden where given)."""
    planes = kernels.inputs(run["kernel"], run["n"])
    if "steps" in run:
        planes["steps"] = run["steps"]
    return planes


def _numpy_run(plan, planes):
    before_in = _nbytes(planes)
    h0, b0 = host_bytes(), switch_bytes()
    t0 = time.perf_counter()
    out = as_dict(plan.plugin, plan.run(**planes))
    seconds = time.perf_counter() - t0
    moved, h1 = switch_bytes() - b0, host_bytes()
    return out, moved, before_in + _nbytes(out), seconds, {h: h1[h] - h0.get(h, 0) for h in h1}


def _on_the_workers(planes, chunks, together):
    """``planes`` with every numpy plane a dask array chunked along samples and persisted on the
    workers: each plane on its own (``together=False``: the scheduler spreads each plane's
    chunks over the workers by itself), or all of them cut from one persisted array of their
    columns (``together=True``: every plane's chunk ``i`` on one worker, as the columns of one
    table or the outputs of an earlier run lie)."""
    import dask
    import dask.array as da
    arrays = {k: v for k, v in planes.items() if isinstance(v, np.ndarray)}
    if not together or any(v.ndim != 1 for v in arrays.values()):
        persisted = dask.persist(*[da.from_array(v, chunks=(chunks,) + v.shape[1:]) for v in arrays.values()])
    else:
        table = da.from_array(np.stack(list(arrays.values()), axis=1), chunks=(chunks, -1)).persist()
        persisted = dask.persist(*[table[:, j] for j in range(len(arrays))])
    return {**planes, **dict(zip(arrays, persisted))}


def _lazy_run(plan, planes, chunks, together=False):
    import dask
    import dask.array as da
    from distributed import wait
    planes = _on_the_workers(planes, chunks, together)
    wait([v for v in planes.values() if isinstance(v, da.Array)], timeout=120)   # inputs on the workers first
    h0, b0 = host_bytes(), switch_bytes()
    t0 = time.perf_counter()
    res = as_dict(plan.plugin, plan.run(**planes))
    keys = sorted(res)
    out = {k: np.asarray(v) for k, v in zip(keys, dask.compute(*[res[k] for k in keys]))}
    seconds = time.perf_counter() - t0
    moved, h1 = switch_bytes() - b0, host_bytes()
    return out, moved, _nbytes(out), seconds, {h: h1[h] - h0.get(h, 0) for h in h1}


def _opened(client, shm) -> dict:
    """{worker address: segments it opened during the run}, from the workers that answer within 10 s."""
    try:
        got = client.sync(client._run, shm.opened, on_error="return", callback_timeout=10)
    except Exception:  # noqa: BLE001 - a stopped worker: no answers
        return {}
    return {a: len(v) for a, v in got.items() if isinstance(v, list)}


def _main(spec_path):
    import socket

    import eagle
    import eagle_dask
    from eagle import plan as eplan
    from eagle_dask import shm
    from tests import kernels as K

    with open(spec_path) as f:
        spec = json.load(f)
    client = eagle_dask.connect(spec["scheduler_file"], timeout=60)
    client.wait_for_workers(spec["workers"], timeout=60)
    workers = sorted(client.scheduler_info()["workers"])
    report = {"host": socket.gethostname(), "driver_host_id": shm.host_id(), "runs": [],
              "worker_host_ids": client.run(shm.host_id), "scheduler": client.scheduler.address,
              "worker_hosts": client.run(socket.gethostname)}
    report["local_workers"] = sorted(shm.LocalWorkers.of(client, workers))
    for i, run in enumerate(spec["runs"]):
        plugin = eagle.deploy(K.CASES[run["kernel"]][0])
        client.run(shm.clear_opened)
        print(f"START {i}", flush=True)
        if run["mode"] == "numpy":
            plan = eplan.plan(plugin, structure=eagle_dask.DaskPartition.on(client, progress=False))
            out, moved, plane_bytes, seconds, by_host = _numpy_run(plan, planes_of(K, run))
        else:
            plan = eplan.plan(plugin, structure=eagle_dask.DaskPartition.on(client, progress=False,
                                                                             min_block=run.get("min_block")))
            out, moved, plane_bytes, seconds, by_host = _lazy_run(plan, planes_of(K, run), run["chunks"],
                                                                  run.get("together", False))
        np.savez(os.path.join(spec["workdir"], f"run{i}.npz"), **out)
        report["runs"].append({**run, "moved": moved, "plane_bytes": plane_bytes, "seconds": seconds,
                               "opened": _opened(client, shm), "by_host": by_host})
        print(f"{run['mode']} {run['kernel']} n={run['n']}: {moved} bytes on the links, {plane_bytes} plane "
              f"bytes, {moved / max(plane_bytes, 1):.2f} per plane byte, {seconds:.2f} s", flush=True)
    with open(os.path.join(spec["workdir"], "report.json"), "w") as f:
        json.dump(report, f)
    if not spec.get("shutdown", True):
        os._exit(0)           # a worker may be stopped: no goodbyes (the caller ends the cluster)
    with contextlib.suppress(Exception):
        client.shutdown()


if __name__ == "__main__":
    _main(sys.argv[1])
