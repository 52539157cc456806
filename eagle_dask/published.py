"""The scheduler file of a cluster eagle starts, for others to join: written private, removed at the end.

``local_cluster(scheduler_file=F)`` writes what ``serve`` (``eagle-dask cluster``) writes: ``F`` (the
scheduler's address, mode 0600) and, under TLS, ``F.credentials.json`` (the client's certificate and
the address, mode 0600), so that another process of yours (a notebook) joins with
``eagle_dask.connect(F)``.  Both are removed when the cluster closes, if they are still yours.
"""
from __future__ import annotations

import json
import os
import threading

from . import security as tls


#: in every scheduler file eagle writes, for whoever reads it (distributed reads the address only)
JOIN_NOTE = ("an eagle cluster with mutual TLS: join with eagle_dask.connect(this file), which reads the "
             "certificate beside it; a plain distributed.Client has none (TypeError: TLS expects a ssl_context)")


def identity(address, **more):
    """The scheduler file's content: the address, and how to join."""
    return json.dumps({"type": "Scheduler", "address": address, **more, "eagle": JOIN_NOTE}, indent=2)


def publish(scheduler_file, address, security):
    """Write ``scheduler_file`` (and the credentials beside it when ``security`` is a ``Security``);
    returns the paths written, for :func:`unpublish`."""
    path = os.path.abspath(os.path.expanduser(os.fspath(scheduler_file)))
    creds = tls.credentials_path(path)
    written = []
    try:
        if security is not None:
            tls.write_client_credentials(creds, security)
            written.append(creds)
            tls.add_address(creds, address)
        tls.write_private(path, identity(address))
        written.append(path)
    except BaseException:
        unpublish(written)
        raise
    return written


def unpublish(paths):
    """Remove ``paths`` that are still regular files of yours (another user's file is left alone)."""
    for path in paths:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid == os.getuid() and not os.path.islink(path) and os.path.isfile(path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass            # removed meanwhile (another rank of the cluster, on a shared file system)


def unpublish_if_names(paths, address):
    """:func:`unpublish` ``paths`` (the scheduler file first) if that file still names ``address``:
    a worker rank whose scheduler died removes what it left, never a newer cluster's file."""
    try:
        named = json.loads(tls.read_private(paths[0], "the scheduler file")).get("address")
    except (OSError, ValueError):
        return
    if named == address:
        unpublish(paths)


#: seconds ``connect`` keeps trying a scheduler file's address before it says the scheduler is gone
GONE_AFTER = 3.0


def scheduler_gone(address, security=None, bound=GONE_AFTER, role="client") -> bool:
    """Whether nothing listens at ``address``: a dask connection (``security``'s credentials for ``role``,
    its handshake, then closed: the scheduler sees an ordinary client come and go) refused for
    ``bound`` seconds.  A host that does not answer (a timeout) is not taken as gone.  Runs in a
    thread of its own, so that it works where an event loop already runs (a notebook)."""
    import asyncio

    from distributed.comm import connect as dask_connect
    args = security.get_connection_args(role) if security is not None else {}
    outcome = {}

    async def probe():
        comm = await dask_connect(address, timeout=bound, **args)
        await comm.close()

    def run():
        try:
            asyncio.run(probe())
        except OSError:                 # refused, or timed out: a plain TCP connection tells which
            outcome["gone"] = _nothing_listens(address)
        except Exception:  # noqa: BLE001 - no conclusion (e.g. no credentials for this address)
            outcome["gone"] = False

    t = threading.Thread(target=run, name="eagle-scheduler-probe", daemon=True)
    t.start()
    t.join(bound + 10)
    return outcome.get("gone", False)


def _nothing_listens(address) -> bool:
    """Whether a plain TCP connection to ``address`` is refused (asked only once a dask connection
    failed: distributed's last error after its retries does not always say it was refused)."""
    import socket
    try:
        host, port = address.split("://", 1)[-1].rsplit(":", 1)
        with socket.create_connection((host.strip("[]"), int(port)), timeout=2.0):
            return False
    except ConnectionRefusedError:
        return True
    except (OSError, ValueError):
        return False

