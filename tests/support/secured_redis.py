"""A Redis as a deployment runs it on its own machine: TLS only (plain connections refused), a
password on the default user, an ACL user for crawlhub, client certificates required. The CA and
the certificates are made here, for the test, with the `cryptography` package.

    with SecuredRedis(tmp_path) as server:
        env = server.client_env()  # REDIS_URL=rediss://crawler:...@127.0.0.1:port/0, REDIS_*_FILE
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from crawlhub.processes import launcher
from tests.support import processes
from tests.support.sites import free_port

USER = "crawler"


def _key(path: Path) -> ec.EllipticCurvePrivateKey:
    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return key


def _certificate(
    path: Path,
    *,
    name: str,
    key,
    issuer_key,
    issuer: x509.Name | None,
    ca: bool,
    addresses: tuple[str, ...] = ("127.0.0.1",),
) -> x509.Name:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        usage = x509.KeyUsage(
            digital_signature=True,
            key_cert_sign=True,
            crl_sign=True,
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            encipher_only=False,
            decipher_only=False,
        )
        builder = builder.add_extension(usage, critical=True)
    else:
        names = [x509.DNSName("localhost")]
        names += [x509.IPAddress(ipaddress.ip_address(address)) for address in addresses]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    certificate = builder.sign(issuer_key, hashes.SHA256())
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return subject


def make_certificates(
    folder: Path, *, addresses: tuple[str, ...] = ("127.0.0.1",)
) -> dict[str, Path]:
    """A CA, a server certificate for localhost and `addresses` and a client certificate, both
    signed by it; and a second CA that signed neither (for the "wrong CA" case)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        name: folder / f"{name}.pem"
        for name in (
            "ca",
            "ca_key",
            "server",
            "server_key",
            "client",
            "client_key",
            "other_ca",
            "other_key",
        )
    }
    ca_key = _key(files["ca_key"])
    ca = _certificate(
        files["ca"], name="test CA", key=ca_key, issuer_key=ca_key, issuer=None, ca=True
    )
    for role in ("server", "client"):
        key = _key(files[f"{role}_key"])
        _certificate(
            files[role],
            name=role,
            key=key,
            issuer_key=ca_key,
            issuer=ca,
            ca=False,
            addresses=addresses,
        )
    other_key = _key(files["other_key"])
    _certificate(
        files["other_ca"],
        name="other CA",
        key=other_key,
        issuer_key=other_key,
        issuer=None,
        ca=True,
    )
    return files


class SecuredRedis(processes.Started):
    """redis-server on a TLS port only, with requirepass and an ACL user: on loopback, or on
    `host` with the server started through `launch` (e.g. ["ip", "netns", "exec", name])."""

    def __init__(
        self, folder: Path, *, host: str = "127.0.0.1", launch: Sequence[str] = ()
    ) -> None:
        self.folder = Path(folder)
        self.host = host
        self.launch = list(launch)
        self.port = free_port()
        self.password = secrets.token_urlsafe(16)
        self.admin_password = secrets.token_urlsafe(16)
        self.files = make_certificates(
            self.folder / "tls", addresses=tuple(dict.fromkeys(("127.0.0.1", host)))
        )
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """The ACL user's URL, without the TLS files (REDIS_CA_FILE... add them)."""
        return f"rediss://{USER}:{self.password}@{self.host}:{self.port}/0"

    def client_env(self) -> dict[str, str]:
        return {
            "REDIS_URL": self.url,
            "REDIS_CA_FILE": str(self.files["ca"]),
            "REDIS_CERT_FILE": str(self.files["client"]),
            "REDIS_KEY_FILE": str(self.files["client_key"]),
        }

    def start(self, *, timeout: float = 30) -> SecuredRedis:
        data = self.folder / "data"
        data.mkdir(parents=True, exist_ok=True)
        command = [
            *self.launch,
            launcher.find_redis_server(),
            "--port",
            "0",
            "--bind",
            self.host,
            "--tls-port",
            str(self.port),
            "--tls-cert-file",
            str(self.files["server"]),
            "--tls-key-file",
            str(self.files["server_key"]),
            "--tls-ca-cert-file",
            str(self.files["ca"]),
            "--tls-auth-clients",
            "yes",
            "--requirepass",
            self.admin_password,
            # One config line, "user crawler on >password ~* &* +@all", a word per argument.
            "--user",
            USER,
            "on",
            f">{self.password}",
            "~*",
            "&*",
            "+@all",
            "--dir",
            str(data),
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            str(data / "redis.log"),
        ]
        self.process = processes.spawn(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while not self._answers():
            assert self.process.poll() is None, f"redis-server exited: {self.log()}"
            assert time.monotonic() < deadline, f"no answer within {timeout} s: {self.log()}"
            time.sleep(0.1)
        return self

    def client(self) -> redis.Redis:
        return redis.Redis(
            host=self.host,
            port=self.port,
            username=USER,
            password=self.password,
            ssl=True,
            ssl_ca_certs=str(self.files["ca"]),
            ssl_certfile=str(self.files["client"]),
            ssl_keyfile=str(self.files["client_key"]),
            socket_timeout=5,
        )

    def _answers(self) -> bool:
        client = self.client()
        try:
            return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return False
        finally:
            client.close()

    def log(self) -> str:
        path = self.folder / "data" / "redis.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else "no log"

    def stop(self) -> None:
        if self.process is not None:
            processes.stop(self.process, timeout=10)
            self.process = None
