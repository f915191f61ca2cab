"""TLS as TorchServe's config.properties sets it, read once: the key and certificate the servers serve with, and the
certificate tsvk's clients verify them against.

TorchServe 0.12 (ConfigManager.getSslContext) serves an `https://` address with `private_key_file` and
`certificate_file` (PEM), else with a Java keystore (`keystore`, `keystore_pass`, `keystore_type`), else with a
self-signed certificate it makes at start; its gRPC ports use the two files when `enable_grpc_ssl=true`. tsvk's
engine serves the two files only, and refuses to start, saying what to set, wherever it would otherwise serve
something the user did not give it: an https address without both files (no made-up certificate), a keystore (Java's
format), a file it cannot read or parse, a relative path (the server runs in its run directory, its clients
elsewhere: the same words would name different files), a private key others may read. Nothing is served over plain
HTTP on an https address.

Clients (`tsvk serve`'s readiness wait, `predict`, `status`, `stop`'s drain, the key renewer, the OIP front's forwarding)
verify an https server against the system's certificate authorities and the certificates of the config's
`certificate_file`, as `curl --cacert` would: a self-signed certificate verifies, as does a chain file that holds its
root; nothing is ever sent unverified.
"""

from __future__ import annotations

import os
import ssl
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from . import defaults
from .errors import UsageError

PRIVATE_KEY_FILE = "private_key_file"
CERTIFICATE_FILE = "certificate_file"
GRPC_SSL = "enable_grpc_ssl"
KEYSTORE = "keystore"
ADDRESS_KEYS = ("inference_address", "management_address", "metrics_address")
OTHERS_ACCESS = 0o007  # a private key others may read (or replace) is refused
# A private key its group may read is served with a warning: Kubernetes mounts a secret group-readable for a pod's
# fsGroup, the way a container of a non-root user reads a secret owned by root.
GROUP_ACCESS = 0o070


class TlsError(UsageError):
    """The config's TLS cannot be served as written; the message says what to set."""


@dataclass(frozen=True)
class ServedTls:
    """The key and certificate (absolute paths of PEM files: served_tls has read them, tls_of only names them) and
    whether gRPC serves them too."""

    key_file: Path
    cert_file: Path
    grpc: bool

    def server_context(self) -> ssl.SSLContext:
        """TLS 1.2 or later, forward-secret AEAD ciphers only (Python's floor; TLS 1.3 suites are OpenSSL's own)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(defaults.TLS_CIPHERS)
        context.load_cert_chain(self.cert_file, self.key_file, password=_no_password(self.key_file))
        return context

    def key_and_chain(self) -> tuple[bytes, bytes]:
        """The PEM bytes gRPC's `ssl_server_credentials` takes."""
        return self.key_file.read_bytes(), self.cert_file.read_bytes()


def served_tls(properties: dict[str, str]) -> ServedTls | None:
    """The config's TLS as a server serves it, checked as far as it can be before a socket opens (the files read, the
    key owner-only); None when it serves none. TlsError says what is wrong and what to set."""
    tls = tls_of(properties)
    if tls is not None:
        _check_key_access(tls.key_file)
        _check_pair(tls)
    return tls


def tls_of(properties: dict[str, str]) -> ServedTls | None:
    """The config's TLS as its clients read it (the files named, not opened); None when it serves none: no key files, no
    https address, no enable_grpc_ssl=true. TlsError for what no server of tsvk's would serve."""
    keystore = properties.get(KEYSTORE, "").strip()
    if keystore:
        raise TlsError(f"{KEYSTORE}={keystore} is a Java keystore, which tsvk cannot read: convert it to PEM "
                       f"(`openssl pkcs12 -in {keystore} -nodes -nocerts -out key.pem`, `openssl pkcs12 -in {keystore} -nokeys "
                       f"-out cert.pem`), set {PRIVATE_KEY_FILE} and {CERTIFICATE_FILE} to them and remove {KEYSTORE}, "
                       "keystore_pass and keystore_type")
    files = _files(properties)
    if files is None:
        _refuse_tls_without_files(properties)
        return None
    return ServedTls(*files, grpc=grpc_tls(properties))


def tls_warnings(tls: ServedTls | None, properties: dict[str, str]) -> list[str]:
    """What is served but deserves a line in the log: a key its group may read, gRPC left in plain text."""
    if tls is None:
        return []
    warnings = []
    mode = stat.S_IMODE(tls.key_file.stat().st_mode)
    if mode & GROUP_ACCESS:
        warnings.append(f"{PRIVATE_KEY_FILE} {tls.key_file} may be read by its group (mode {mode:o}); `chmod 600 {tls.key_file}` "
                        "unless that group must read it (a Kubernetes fsGroup)")
    if not tls.grpc:
        warnings.append(f"{GRPC_SSL}=false: gRPC is served in plain text beside https")
    return warnings


def grpc_tls(properties: dict[str, str]) -> bool:
    """gRPC serves TLS whenever the key files are set, unless `enable_grpc_ssl=false` says otherwise (TorchServe's own
    gRPC ports default to plain text; here plain text beside https must be asked for)."""
    return properties.get(GRPC_SSL, "true").strip().lower() != "false"


def https_addresses(properties: dict[str, str]) -> list[str]:
    return [key for key in ADDRESS_KEYS if is_https(properties.get(key, ""))]


def is_https(url: str) -> bool:
    return urlsplit(url.strip()).scheme.lower() == "https"


def _files(properties: dict[str, str]) -> tuple[Path, Path] | None:
    """Both files as absolute paths, or None when neither is set; one alone, or a relative path, is refused."""
    given = {key: properties.get(key, "").strip() for key in (PRIVATE_KEY_FILE, CERTIFICATE_FILE)}
    if not any(given.values()):
        return None
    missing = [key for key, value in given.items() if not value]
    if missing:
        present = next(key for key, value in given.items() if value)
        raise TlsError(f"{present} is set but {missing[0]} is not: set both, to PEM files")
    for key, value in given.items():
        if not Path(value).is_absolute():
            raise TlsError(f"{key}={value} is a relative path: set it to an absolute one (the server runs in its run "
                           "directory, its clients elsewhere)")
    return Path(given[PRIVATE_KEY_FILE]), Path(given[CERTIFICATE_FILE])


def _refuse_tls_without_files(properties: dict[str, str]) -> None:
    """TorchServe would serve an https address with a certificate it makes up at start; here it is refused."""
    https = https_addresses(properties)
    if https:
        raise TlsError(f"{https[0]}={properties[https[0]].strip()} is https, but {PRIVATE_KEY_FILE} and {CERTIFICATE_FILE} "
                       "are not set: set both to PEM files (`tsvk config --tls-key KEY --tls-cert CERT`), or serve http")
    if properties.get(GRPC_SSL, "").strip().lower() == "true":
        raise TlsError(f"{GRPC_SSL}=true, but {PRIVATE_KEY_FILE} and {CERTIFICATE_FILE} are not set: set both to PEM files")


def _check_key_access(key: Path) -> None:
    """The private key must exist and be readable by its owner only (its group may, with a warning)."""
    try:
        mode = stat.S_IMODE(key.stat().st_mode)
    except OSError as err:
        raise TlsError(f"{PRIVATE_KEY_FILE} {key} cannot be read: {err.strerror}") from None
    if mode & OTHERS_ACCESS:
        raise TlsError(f"{PRIVATE_KEY_FILE} {key} may be read by others (mode {mode:o}): run `chmod 600 {key}` (its owner "
                       "only; 640 where a group must read it)")


def _check_pair(tls: ServedTls) -> None:
    """Both files readable, PEM, unencrypted, and the key the certificate's: loaded as the servers will load them."""
    for key, path in ((PRIVATE_KEY_FILE, tls.key_file), (CERTIFICATE_FILE, tls.cert_file)):
        if not os.access(path, os.R_OK) or not path.is_file():
            raise TlsError(f"{key} {path} cannot be read: not a file this user may read")
    try:
        tls.server_context()
    except ssl.SSLError as err:
        raise TlsError(f"{PRIVATE_KEY_FILE} {tls.key_file} and {CERTIFICATE_FILE} {tls.cert_file} are not a PEM private key "
                       f"and its certificate ({err.reason or err}): give both in PEM, the certificate first in its chain") from None


def _no_password(key_file: Path):
    """An encrypted key would make OpenSSL ask for its pass phrase on the terminal; it is refused instead."""
    def refuse() -> bytes:
        raise TlsError(f"{PRIVATE_KEY_FILE} {key_file} is encrypted: give it unencrypted, readable by its owner only "
                       f"(`openssl pkey -in {key_file} -out key.pem`), as TorchServe reads it")

    return refuse


def client_context(properties: dict[str, str]) -> ssl.SSLContext:
    """What tsvk's clients verify a server of this config with: the system's authorities and the certificates of the
    config's certificate_file (the same trust gRPC's and tritonclient's clients are given: a file). Host names are
    checked as always: the certificate must name the host a client connects to (127.0.0.1 for 0.0.0.0)."""
    return verifying(root_certificate(properties))


def verifying(certificate: Path | None) -> ssl.SSLContext:
    """A client context of the system's authorities, plus the certificates of `certificate` (a PEM file) when given."""
    context = ssl.create_default_context()
    if certificate is None:
        return context
    try:
        context.load_verify_locations(cafile=os.fspath(certificate))
    except (OSError, ssl.SSLError) as err:
        raise TlsError(f"{CERTIFICATE_FILE} {certificate} cannot be read as a PEM certificate: {err}") from None
    return context


def root_certificate(properties: dict[str, str]) -> Path | None:
    """The config's certificate_file, which tsvk's clients trust."""
    certificate = properties.get(CERTIFICATE_FILE, "").strip()
    return Path(certificate) if certificate else None


def raise_if_unverified(url: str, err: OSError) -> None:
    """An https server whose certificate does not verify, said with what to do (a client never goes on unverified)."""
    reason = getattr(err, "reason", err)
    if isinstance(reason, ssl.SSLCertVerificationError):
        raise UsageError(f"{url}: the server's certificate does not verify ({reason.verify_message}); tsvk trusts the system's "
                         f"authorities and the config's {CERTIFICATE_FILE}, which must name the host connected to") from None
