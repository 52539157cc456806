"""Credentials for mutual TLS on every cluster eagle_dask starts, and the files a joining client reads.

* :func:`resolve` -- the one reading of a ``security=`` argument: ``None`` makes fresh
  credentials (:func:`fresh`), a ``distributed.Security`` is used as given, ``False`` is plain TCP.
* :func:`fresh` -- a new certificate authority and one certificate each for the scheduler, the
  workers and the clients, signed by it, all in memory (PEM text).  The authority's private key
  is dropped once they are signed: nobody can make another certificate this cluster accepts.
* :func:`role_fields` / :func:`as_config` -- one role's part of a ``Security`` (what a rank needs,
  sent over MPI), and the same as dask config values (dask-mpi reads its security from there).
* :func:`write_private` -- a file only its owner reads (``O_EXCL``, mode 0600), refusing to
  replace one that belongs to someone else; :func:`write_client_credentials` /
  :func:`read_client_credentials` -- the client's part beside a scheduler file;
  :func:`read_private` / :func:`read_scheduler_file` -- files read only when they are yours, not a
  link, mode 0600 (a scheduler file another user wrote first is refused, never connected to).
"""
from __future__ import annotations

import datetime
import errno
import json
import os
import stat

ROLES = ("scheduler", "worker", "client")
VALID_DAYS = 365
TLS_FIELDS = ("tls_ca_file", "tls_ciphers", "tls_min_version", "tls_max_version")


def _name(common_name):
    from cryptography import x509
    from cryptography.x509.oid import NameOID
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "eagle_dask cluster"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key):
    from cryptography.hazmat.primitives import serialization
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _pem_cert(cert):
    from cryptography.hazmat.primitives import serialization
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _certificate(subject, issuer, public_key, signing_key, *, ca):
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
         .serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                          content_commitment=False, key_encipherment=False,
                                          data_encipherment=False, key_agreement=False,
                                          encipher_only=False, decipher_only=False), critical=True)
    else:
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                   ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        b = b.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return b.sign(signing_key, hashes.SHA256())


def _need_cryptography():
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise ImportError("eagle_dask makes fresh TLS credentials for each cluster with the `cryptography` "
                          "package, which is not installed: pip install 'eagle[dask]' (or cryptography), "
                          "or pass security=distributed.Security(...) with your own certificates, or "
                          "security=False for plain TCP (any local user can then run code as you)") from None


def fresh():
    """A ``distributed.Security`` for mutual TLS with a new authority and a certificate per role.

    Elliptic-curve keys (P-256), PEM text in memory; every peer must present a certificate this
    authority signed, and the authority's own key is not kept.
    """
    _need_cryptography()
    from cryptography.hazmat.primitives.asymmetric import ec
    from distributed import Security
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("eagle_dask cluster authority")
    ca = _certificate(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)
    fields = {"tls_ca_file": _pem_cert(ca)}
    for role in ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(_name(f"eagle_dask {role}"), ca_name, key.public_key(), ca_key, ca=False)
        fields[f"tls_{role}_cert"] = _pem_cert(cert)
        fields[f"tls_{role}_key"] = _pem_key(key)
    del ca_key
    return Security(require_encryption=True, **fields)


def check(security, where):
    """Refuse a ``security=`` that is not None, False or a ``distributed.Security`` (nothing is made)."""
    from distributed import Security
    if security is None or security is False or isinstance(security, Security):
        if security is None:
            _need_cryptography()
        return
    raise TypeError(f"{where}(security={security!r}): security is None (fresh mutual-TLS credentials for this "
                    "cluster, the default), a distributed.Security (your own certificates), or False (plain "
                    f"TCP: any local user can run code as you), not a {type(security).__name__}")


def resolve(security, where):
    """``security=`` as given to ``where``: a ``Security`` (fresh credentials for None), or None for False."""
    check(security, where)
    if security is None:
        return fresh()
    return None if security is False else security


def role_fields(security, role):
    """The fields of ``security`` one role needs (its certificate and key, the authority, the TLS settings),
    as a picklable dict; :func:`from_fields` rebuilds a ``Security`` that plays ``role``."""
    if role not in ROLES:
        raise ValueError(f"role_fields(role={role!r}): the role is one of {ROLES}")
    out = {f: getattr(security, f) for f in TLS_FIELDS}
    out["require_encryption"] = security.require_encryption
    out["cert"] = getattr(security, f"tls_{role}_cert")
    out["key"] = getattr(security, f"tls_{role}_key")
    out["role"] = role
    return out


def from_fields(fields):
    """A ``Security`` from :func:`role_fields` (the same certificate for the roles it does not name)."""
    from distributed import Security
    own = {f"tls_{r}_{part}": fields[part] for r in ROLES for part in ("cert", "key")}
    extra = {f: fields[f] for f in ("tls_min_version", "tls_max_version") if fields.get(f) is not None}
    return Security(require_encryption=fields["require_encryption"], tls_ca_file=fields["tls_ca_file"],
                    tls_ciphers=fields.get("tls_ciphers"), **own, **extra)


def as_config(fields):
    """:func:`role_fields` as the dask config values distributed's ``Security()`` reads."""
    role = fields["role"]
    cfg = {"distributed.comm.require-encryption": bool(fields["require_encryption"]),
           "distributed.comm.tls.ca-file": fields["tls_ca_file"],
           f"distributed.comm.tls.{role}.cert": fields["cert"],
           f"distributed.comm.tls.{role}.key": fields["key"]}
    if fields.get("tls_ciphers"):
        cfg["distributed.comm.tls.ciphers"] = fields["tls_ciphers"]
    return cfg


# -- files a joining client reads ---------------------------------------------------------
def credentials_path(scheduler_file):
    """Where :func:`serve` puts the client's credentials: beside the scheduler file."""
    return os.fspath(scheduler_file) + ".credentials.json"


def _refuse_foreign(path):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if st.st_uid != os.getuid():
        raise PermissionError(f"{path} exists and belongs to uid {st.st_uid}, not to you (uid {os.getuid()}): "
                              "it is not replaced; choose another --scheduler-file in a directory only you "
                              "write to")
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        raise PermissionError(f"{path} exists and is not a regular file: it is not replaced; choose another "
                              "--scheduler-file")


def write_private(path, text):
    """Write ``text`` to ``path`` readable by its owner only (mode 0600), atomically.

    The text goes to a new file (``O_EXCL``, ``O_NOFOLLOW``, mode 0600) then replaces ``path``; a
    ``path`` that exists and belongs to another user, or is not a file, is refused.
    """
    path = os.fspath(path)
    _refuse_foreign(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    _refuse_foreign(tmp)
    if os.path.lexists(tmp):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            fd = None
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if fd is not None:
            os.close(fd)
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def write_client_credentials(path, security):
    """The client's part of ``security`` (certificate, key, authority: PEM text or paths) into ``path``, 0600."""
    write_private(path, json.dumps(role_fields(security, "client"), default=str))


def read_private(path, what):
    """The text of ``path``, which must be a regular file (not a link), yours, and mode 0600.

    Opened ``O_NOFOLLOW | O_NONBLOCK`` and checked on the open descriptor (``fstat``), so the file
    read is the file checked; anything else is refused by name with what to do.
    """
    path = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PermissionError(f"{what} {path} is a symbolic link: it is not followed (anyone who could "
                                  "make it could point it anywhere); use the file the cluster wrote") from None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise PermissionError(f"{what} {path} is not a regular file: it is not read")
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise PermissionError(f"{what} {path} is mode {stat.S_IMODE(st.st_mode):04o}, owned by uid {st.st_uid}: "
                                  f"it must be yours and readable by you only (chmod 600, as eagle writes it); "
                                  "another user may have written or read it, so it is not trusted: restart the "
                                  "cluster with its file in a directory only you write to")
        return f.read(1 << 20).decode()


def read_client_credentials(path):
    """A ``Security`` for a client from the file :func:`write_client_credentials` wrote (yours, mode 0600)."""
    fields = json.loads(read_private(path, "the credentials file"))
    for f in ("tls_min_version", "tls_max_version"):
        fields[f] = None      # written as text; distributed's defaults apply
    return from_fields(fields)


def add_address(path, address):
    """Put the scheduler's ``address`` into the credentials file ``path`` (still 0600): a client takes
    the address from there, not from the scheduler file alone."""
    fields = json.loads(read_private(path, "the credentials file"))
    fields["address"] = address
    write_private(path, json.dumps(fields))


def read_scheduler_file(path, security=None):
    """(address, ``Security`` or None) for joining the cluster whose scheduler file is ``path``.

    ``path`` must be yours, a regular file, mode 0600 (as :func:`serve` writes it).  With
    ``security=None`` its address must be ``tls://`` and the credentials beside it are used, their
    address first; a ``Security`` is used as given (``tls://`` too); ``security=False`` accepts a
    ``tcp://`` address (a cluster started with ``--no-tls``).
    """
    address = json.loads(read_private(path, "the scheduler file"))["address"]
    if security is False:
        return address, None
    if not str(address).startswith("tls://"):
        raise PermissionError(f"the scheduler file {path} names {address}, not a tls:// address: eagle's clusters "
                              "run mutual TLS, so it is not trusted; for a cluster you started with --no-tls "
                              "pass security=False (eagle-dask info --no-tls)")
    if security is not None:
        return address, security
    creds = credentials_path(path)
    if not os.path.lexists(creds):
        raise FileNotFoundError(f"eagle_dask.connect: the cluster at {address} runs mutual TLS and its client "
                                f"credentials {creds} are missing: they are written beside the scheduler file by "
                                "the `eagle-dask cluster` (or local_cluster(scheduler_file=...)) that wrote it")
    fields = json.loads(read_private(creds, "the credentials file"))
    return fields.get("address") or address, read_client_credentials(creds)
