"""A second process that knows only addresses and tries to run code on the cluster behind them.

    python intruder.py SPEC.json

SPEC: {"ports": [[host, port], ...], "marker_dir": D, "modes": [...], "credentials": F or null}.
For every listening port and every mode it tries, as an attacker with distributed's own client
would: ``Client(address).run/submit/run_on_scheduler`` and the raw ``run`` / ``run_function``
handlers a worker, nanny or scheduler serves; each payload creates a file in ``marker_dir``.
Modes:

* ``tcp`` -- plain TCP, no TLS;
* ``tls-nocert`` -- TLS without a certificate (and trusting any server);
* ``tls-other`` -- ``Security.temporary()``: TLS with a certificate of another authority;
* ``tls-other-trusting`` -- the same certificate, trusting any server (only the server's check
  stands between it and the cluster);
* ``credentials`` -- the client credentials file of ``eagle-dask cluster`` (the control: it must get in).

A port that answers an HTTP request (the dashboard, a worker's metrics page: read-only HTTP, see
docs/security.md) is listed under ``http`` and not attacked.  Ports are tried in parallel.
Prints one line ``RESULT <json>``: {"attempts": [{port, mode, how, ok, error, seconds}], "http": [ports]}.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import socket
import ssl
import sys
import threading
import time

ATTEMPT_S = 4


def touch(path):
    path = f"{path}-{os.getpid()}"
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    return path


def _trusting(cert=None, key=None):
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if cert is not None:
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            c, k = os.path.join(d, "c.pem"), os.path.join(d, "k.pem")
            open(c, "w").write(cert)
            open(k, "w").write(key)
            ctx.load_cert_chain(c, k)
    return ctx


def security(mode, credentials):
    from distributed import Security

    class Trusting(Security):
        """Connects with a given SSL context (no server check)."""

        def __init__(self, ctx):
            super().__init__(require_encryption=True)
            self._ctx = ctx

        def get_connection_args(self, role):
            return {"ssl_context": self._ctx, "require_encryption": True, "extra_conn_args": {}}

    if mode == "tcp":
        return "tcp", Security()
    if mode == "tls-nocert":
        return "tls", Trusting(_trusting())
    other = Security.temporary()
    if mode == "tls-other":
        return "tls", other
    if mode == "tls-other-trusting":
        return "tls", Trusting(_trusting(other.tls_client_cert, other.tls_client_key))
    if mode == "credentials":
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        from eagle_dask.security import read_client_credentials
        return "tls", read_client_credentials(credentials)
    raise ValueError(mode)


def with_client(address, sec, marker):
    from distributed import Client
    c = Client(address, security=sec, timeout=ATTEMPT_S, set_as_default=False)
    try:
        c.run(touch, marker + "-run", wait=True)
        c.submit(touch, marker + "-submit", pure=False).result(timeout=ATTEMPT_S)
        c.run_on_scheduler(touch, marker + "-scheduler")
    finally:
        c.close(timeout=ATTEMPT_S)


async def raw(address, sec, marker):
    """The out-of-band ``run`` handler of a worker or nanny, else a scheduler's ``run_function``."""
    from distributed.core import rpc
    from distributed.protocol.pickle import dumps
    args = dict(connection_args=sec.get_connection_args("client"), timeout=ATTEMPT_S)
    async with rpc(address, **args) as r:
        answer = await r.run(function=dumps(touch), args=dumps((marker + "-run",)))
    if answer is None:            # no `run` handler (the scheduler logs a KeyError): a scheduler
        async with rpc(address, **args) as r:
            answer = await r.run_function(function=dumps(touch), args=dumps((marker + "-function",)))
    if not (isinstance(answer, dict) and answer.get("status") == "OK"):
        raise RuntimeError(f"the handler answered {answer!r}"[:300])


def bounded(fn, *args):
    """fn(*args) in a daemon thread, at most 2 * ATTEMPT_S seconds; the error or None."""
    box = {}

    def go():
        try:
            fn(*args)
        except BaseException as e:  # noqa: BLE001 - recorded
            box["error"] = f"{type(e).__name__}: {e}"[:300]

    th = threading.Thread(target=go, daemon=True)
    th.start()
    th.join(2 * ATTEMPT_S)
    if th.is_alive():
        return "no answer within the bound (left hanging)"
    return box.get("error")


def is_http(host, port):
    """Whether the port answers a plain HTTP request like an HTTP server."""
    try:
        with socket.create_connection((host, port), timeout=ATTEMPT_S) as s:
            s.settimeout(ATTEMPT_S)
            s.sendall(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n")
            return s.recv(5) == b"HTTP/"
    except OSError:
        return False


def attack(host, port, modes, credentials, marker_dir):
    out = []
    for mode in modes:
        scheme, sec = security(mode, credentials)
        address = f"{scheme}://{host}:{port}"
        marker = os.path.join(marker_dir, f"ran-{mode}-{port}")
        for how, fn in (("client", with_client), ("raw", lambda a, s, m: asyncio.run(raw(a, s, m)))):
            t = time.monotonic()
            err = bounded(fn, address, sec, marker + "-" + how)
            out.append({"port": port, "mode": mode, "how": how, "ok": err is None, "error": err,
                        "seconds": round(time.monotonic() - t, 2)})
    return out


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    ports = [tuple(p) for p in spec["ports"]]
    with concurrent.futures.ThreadPoolExecutor(len(ports)) as pool:
        http = dict(zip(ports, pool.map(lambda p: is_http(*p), ports)))
        jobs = [pool.submit(attack, host, port, spec["modes"], spec.get("credentials"), spec["marker_dir"])
                for host, port in ports if not http[(host, port)]]
        attempts = [a for job in jobs for a in job.result()]
    print("RESULT " + json.dumps({"attempts": attempts, "http": sorted(p for (_, p), h in http.items() if h)}),
          flush=True)


if __name__ == "__main__":
    main()
