"""Self-signed PEM keys and certificates for the TLS tests, made with `cryptography` (as `openssl req -x509` would)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

HOSTS = ("localhost",)
ADDRESSES = ("127.0.0.1",)  # what tsvk's clients connect to for 0.0.0.0 and 127.0.0.1


@dataclass(frozen=True)
class KeyPair:
    key: Path
    cert: Path

    def properties(self) -> dict[str, str]:
        return {"private_key_file": str(self.key), "certificate_file": str(self.cert)}


def self_signed(folder: Path, name: str = "server", password: bytes | None = None, hosts: tuple[str, ...] = HOSTS,
                addresses: tuple[str, ...] = ADDRESSES) -> KeyPair:
    """An RSA key (PKCS#8, owner-only, as TorchServe reads it) and a certificate naming `hosts` and `addresses`
    (localhost and 127.0.0.1 by default)."""
    folder.mkdir(parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0] if hosts else "tsvk test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    names = [x509.DNSName(h) for h in hosts] + [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
    certificate = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=2))
                   .add_extension(x509.SubjectAlternativeName(names), critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, hashes.SHA256()))
    encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    key_path, cert_path = folder / f"{name}.key", folder / f"{name}.pem"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption))
    key_path.chmod(0o600)
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return KeyPair(key_path, cert_path)
