"""TLS for the lab's services (``tailtap lab run --tls``): a self-signed
certificate for the server, and the client's TLS context, which writes the session secrets
to a key log (SSLKEYLOGFILE's format) as ops teams' own rigs do.

grpcio cannot write a key log: over TLS the gRPC service is called by httpx instead
(grpc_tls_client.py), whose OpenSSL can.
"""

from __future__ import annotations

import datetime as dt
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

HOSTNAME = "lab-llm.test"  # the certificate's name, sent by the client as SNI


def self_signed(folder: Path, hostname: str = HOSTNAME) -> tuple[Path, Path]:
    """Write cert.pem and key.pem (P-256, valid for two days) into ``folder``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(hostname)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def client_context(keylog: str | Path, alpn: list[str]) -> ssl.SSLContext:
    """The lab client's context: the self-signed server is trusted as is; every session's
    secrets go to ``keylog``."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.keylog_filename = str(keylog)
    ctx.set_alpn_protocols(alpn)
    return ctx
