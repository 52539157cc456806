"""The scheduler file of a cluster eagle starts, for others to join: written private, removed at the end.

``local_cluster(scheduler_file=F)`` writes what ``serve`` (``eagle-dask cluster``) writes: ``F`` (the
scheduler's address, mode 0600) and, under TLS, ``F.credentials.json`` (the client's certificate and
the address, mode 0600), so that another process of yours (a notebook) joins with
``eagle_dask.connect(F)``.  Both are removed when the cluster closes, if they are still yours.
"""
from __future__ import annotations

import json
import os
import socket
import time

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
    except (OSError, ValueError, PermissionError):
        return
    if named == address:
        unpublish(paths)


#: seconds ``connect`` keeps trying a scheduler file's address before it says the scheduler is gone
GONE_AFTER = 3.0


def scheduler_gone(address, bound=GONE_AFTER) -> bool:
    """Whether nothing listens at ``address`` (``tls://host:port``): every TCP connection refused for
    ``bound`` seconds.  A host that does not answer (a timeout) is not taken as gone."""
    try:
        host, port = address.split("://", 1)[-1].rsplit(":", 1)
        port = int(port)
    except ValueError:
        return False
    end = time.monotonic() + bound
    while True:
        try:
            with socket.create_connection((host.strip("[]"), port), timeout=min(bound, 2.0)):
                return False
        except ConnectionRefusedError:
            if time.monotonic() >= end:
                return True
            time.sleep(0.2)
        except OSError:
            return False
