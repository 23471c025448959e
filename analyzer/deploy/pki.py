"""The deployment's own certificate authority and the broker's server certificate.

Devices trust exactly one CA: the project CA created here, not the system's store. Keys are
ECDSA P-256 (small and fast on a Raspberry Pi; every OpenSSL that Mosquitto and Python use
supports them). Certificates carry the extensions strict verifiers require (critical basic
constraints and key usage, subject and authority key identifiers).

Where the private keys live and who may read them:

- ``ca.key``: signs server certificates. Mode 0600, owned by whoever ran the command (root).
  Nothing running needs it: keep it offline once the server certificate is issued.
- ``server.key``: Mosquitto's TLS key. Mode 0600, owned by the broker's user (``mosquitto``)
  because Mosquitto opens it after dropping root.

Every file is written to a temporary name with its final mode from the start and then
renamed into place, so a private key is never readable by others, not even for a moment.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from analyzer.errors import ProvisioningError
from analyzer.files import Owner, write_file

log = logging.getLogger(__name__)

CA_DAYS = 3650
SERVER_DAYS = 825  # the longest server-certificate life common TLS clients still accept


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Barkwatch"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass(frozen=True)
class CertificateAuthority:
    """A loaded CA: certificate and private key."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> CertificateAuthority:
        """Load a CA written by :func:`create_ca`; raise ProvisioningError naming the file."""
        try:
            certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
        except (OSError, ValueError) as exc:
            raise ProvisioningError(f"cannot load the CA certificate {cert_path}: {exc}") from exc
        try:
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            raise ProvisioningError(f"cannot load the CA key {key_path}: {exc}") from exc
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ProvisioningError(f"{key_path} is not an EC private key")
        return cls(certificate, key)


def create_ca(cert_path: Path, key_path: Path, common_name: str, days: int = CA_DAYS) -> None:
    """Create a new CA: ``key_path`` (0600) and ``cert_path`` (0644).

    Refuses to overwrite an existing key or certificate: replacing the CA means re-issuing
    every device's configuration.
    """
    for existing in (cert_path, key_path):
        if existing.exists():
            raise ProvisioningError(
                f"{existing} already exists; refusing to replace the deployment's CA "
                "(move the old files away first if you really mean to)"
            )
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = _name(common_name)
    identifier = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(identifier, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(identifier),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    write_file(key_path, _key_pem(key), 0o600)
    write_file(cert_path, certificate.public_bytes(serialization.Encoding.PEM), 0o644)
    log.info("created CA %r: certificate %s, key %s (0600)", common_name, cert_path, key_path)


def issue_server_certificate(
    ca: CertificateAuthority,
    cert_path: Path,
    key_path: Path,
    names: list[str],
    days: int = SERVER_DAYS,
    owner: Owner | None = None,
) -> None:
    """Issue the broker's certificate for ``names`` (host names and IP addresses).

    Every name goes into the subject alternative names; IP addresses as IP entries, which is
    what Python's ``ssl`` matches an address against. The key (0600) and certificate (0644)
    are given to ``owner`` when running as root. Overwrites an existing pair (renewal).
    """
    if not names:
        raise ProvisioningError("the server certificate needs at least one host name or address")
    alternative: list[x509.GeneralName] = []
    for name in names:
        try:
            alternative.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alternative.append(x509.DNSName(name))
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    ca_identifier = ca.certificate.extensions.get_extension_for_class(
        x509.SubjectKeyIdentifier
    ).value
    certificate = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(
            min(now + datetime.timedelta(days=days), ca.certificate.not_valid_after_utc)
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_identifier),
            critical=False,
        )
        .sign(ca.key, hashes.SHA256())
    )
    write_file(key_path, _key_pem(key), 0o600, owner)
    write_file(cert_path, certificate.public_bytes(serialization.Encoding.PEM), 0o644, owner)
    log.info("issued server certificate %s for %s (key %s, 0600)", cert_path, names, key_path)
