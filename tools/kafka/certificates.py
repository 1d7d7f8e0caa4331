"""Self-signed TLS material for the secured test broker: a CA, a broker certificate for
127.0.0.1/localhost, client certificates, and unsecured OAuth bearer tokens.

Made with the ``cryptography`` package (the ``test`` extra), in PEM files Kafka reads as
they are (``ssl.keystore.type=PEM``, KIP-651) and kafka-python loads through ``ssl``:
nothing here is meant to protect anything, only to exercise the same code paths as a real
cluster's certificates and tokens.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import ipaddress
import json
import time
from pathlib import Path

__all__ = ["CertificateAuthority", "IssuedCertificate", "unsecured_jwt"]

_VALIDITY = datetime.timedelta(days=2)


@dataclasses.dataclass(frozen=True)
class IssuedCertificate:
    """PEM files of one certificate: ``cert`` (the certificate, then the CA's), ``key`` (its
    private key, PKCS#8, encrypted with ``password`` when one is given) and ``keystore`` (key
    and chain in one file, Kafka's PEM keystore)."""

    cert: Path
    key: Path
    keystore: Path
    password: str | None


class CertificateAuthority:
    """A CA whose certificate is ``<directory>/<name>-ca.pem``; :meth:`issue` signs more."""

    def __init__(self, directory: Path, name: str = "test") -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                      .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
                      .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + _VALIDITY)
                      .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                      .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                   content_commitment=False, key_encipherment=False,
                                                   data_encipherment=False, key_agreement=False,
                                                   encipher_only=False, decipher_only=False), critical=True)
                      .sign(self._key, hashes.SHA256()))
        self.cert = self.directory / f"{name}-ca.pem"
        self.cert.write_bytes(self._pem(self._cert))

    @staticmethod
    def _pem(cert) -> bytes:
        from cryptography.hazmat.primitives.serialization import Encoding

        return cert.public_bytes(Encoding.PEM)

    def issue(self, name: str, *, server: bool = False, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
              password: str | None = None) -> IssuedCertificate:
        """A certificate for ``name``: a server's names its ``hosts`` (IP addresses and DNS
        names) for hostname checks; a client's is only good for client authentication."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                   .issuer_name(self._cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + _VALIDITY)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                         else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if server:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                      else serialization.NoEncryption())
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
        chain = self._pem(cert) + self._pem(self._cert)
        issued = IssuedCertificate(cert=self.directory / f"{name}.pem", key=self.directory / f"{name}-key.pem",
                                   keystore=self.directory / f"{name}-keystore.pem", password=password)
        issued.cert.write_bytes(chain)
        issued.key.write_bytes(key_pem)
        issued.keystore.write_bytes(key_pem + chain)
        return issued


def _b64url(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def unsecured_jwt(subject: str, *, lifetime_s: float = 3600.0, issued_at: float | None = None) -> str:
    """An unsigned JWT (``alg: none``) as Kafka's unsecured OAUTHBEARER validator accepts it:
    ``sub``, ``iat`` and ``exp`` claims. A negative ``lifetime_s`` gives an expired token."""
    now = time.time() if issued_at is None else issued_at
    claims = {"sub": subject, "iat": int(now) - 1, "exp": int(now + lifetime_s)}
    return f"{_b64url({'alg': 'none'})}.{_b64url(claims)}."
