"""An artifact's files on disk: read from inside its directory only, and signed with a key.

A signature (``signature.json``) holds an HMAC-SHA256 of every other file of the artifact, keyed
by a secret the user keeps (``key=``): without the key nobody can make a signature that checks,
however they edit the files and their hashes.  Each file's MAC covers its name and its bytes, so
files cannot be swapped either.  The bytes checked are the bytes then parsed: nothing is read
twice.  A file is read only when it is a regular file inside the artifact (no link followed, no
FIFO or device opened to wait on) of at most :data:`MAX_FILE_BYTES`.
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import stat

SIGNATURE = "signature.json"
ALGORITHM = "HMAC-SHA256"
#: the most bytes one file of an artifact may hold (its manifest, source or signature)
MAX_FILE_BYTES = 64 * 2**20


def as_key(key) -> bytes:
    """A signing key as bytes (a ``str`` is taken as UTF-8); an empty key is refused."""
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, (bytes, bytearray)) or not key:
        raise TypeError(f"an artifact key is non-empty bytes or str, not {type(key).__name__}")
    return bytes(key)


def mac(key: bytes, name: str, data: bytes) -> str:
    return hmac.new(key, b"eagle artifact\0" + name.encode() + b"\0" + data, hashlib.sha256).hexdigest()


def read_inside(path: str, name: str, where: str) -> bytes:
    """The bytes of ``path/name``: a regular file of the artifact itself, at most :data:`MAX_FILE_BYTES`.

    A link out of ``path`` is refused by name; the file is opened ``O_NOFOLLOW | O_NONBLOCK`` (no
    link followed, a FIFO or device never waited on) and checked on the open descriptor.
    """
    full = os.path.join(path, name)
    root = os.path.realpath(path)
    real = os.path.realpath(full)
    if os.path.commonpath([root, real]) != root:
        raise ValueError(f"{where}: {name} points outside the artifact (to {real!r}); an artifact's files lie "
                         "in its directory: copy the file there instead of linking it")
    try:
        fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise ValueError(f"{where}: {name} is a symbolic link; an artifact's files are read without following "
                         "links: copy the file there instead of linking it") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{where}: {name} is not a regular file (a FIFO, device or directory is never "
                             "read); save the plugin again with eagle.save(plugin, path)")
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"{where}: {name} is larger than {MAX_FILE_BYTES // 2**20} MiB, the most an artifact's "
                         "file may hold; it is not read: save the plugin again with eagle.save(plugin, path)")
    return data


def write_signature(path: str, files: dict, key) -> None:
    """Sign ``files`` (name -> bytes, as written in ``path``) with ``key``."""
    key = as_key(key)
    doc = {"algorithm": ALGORITHM, "files": {name: mac(key, name, data) for name, data in sorted(files.items())}}
    with open(os.path.join(path, SIGNATURE), "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")


def check_signature(path: str, files: dict, key, where: str) -> None:
    """Refuse, naming the file, an artifact whose ``files`` (name -> bytes read) are not exactly
    those signed with ``key``."""
    key = as_key(key)
    try:
        doc = json.loads(read_inside(path, SIGNATURE, where))
    except FileNotFoundError:
        raise ValueError(f"{where} is not signed ({SIGNATURE} is missing), so it cannot be checked against "
                         "key=: save it with eagle.save(plugin, path, key=...), or load it without key= if "
                         "you trust its directory") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: {SIGNATURE} is not JSON ({e})") from None
    signed = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(signed, dict) or doc.get("algorithm") != ALGORITHM:
        raise ValueError(f"{where}: {SIGNATURE} is not an {ALGORITHM} signature of eagle's")
    for name in sorted(set(files) | set(signed)):
        if name not in signed:
            raise ValueError(f"{where}: {name} is not signed ({SIGNATURE} has no entry for it)")
        if name not in files:
            raise ValueError(f"{where}: {SIGNATURE} signs {name!r}, which is not a file of the artifact")
        if not (isinstance(signed[name], str) and hmac.compare_digest(signed[name], mac(key, name, files[name]))):
            raise ValueError(f"{where}: {name} does not match its signature (changed after it was signed, or "
                             "signed with another key); do not run it: save the plugin again with the key")
