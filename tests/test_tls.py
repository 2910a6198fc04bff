"""A real mutual-TLS Dask cluster on 127.0.0.1: sketches over it, refuses untrusted clients.

The certificates are made here with ``cryptography``: a CA that signs the scheduler, worker and
client certificates, and a second, unrelated CA with its own client certificate. The scheduler
and two workers are ``dask scheduler`` / ``dask worker`` processes started with
``--protocol tls --tls-ca-file --tls-cert --tls-key`` (:class:`LocalProcessCluster` with
``security=``), as in ``deploy/tls/README.md``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import pytest

pytest.importorskip("cryptography")

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402
from distributed import Client, Security  # noqa: E402

import streamrff as srf  # noqa: E402
from streamrff.testing import LocalProcessCluster  # noqa: E402

pytestmark = pytest.mark.timeout(120)

#: Seconds a refused client may try before it must have failed.
_REFUSAL_TIMEOUT = 5


@dataclass(frozen=True)
class Credential:
    cert: Path
    key: Path


@dataclass(frozen=True)
class PKI:
    ca: Path
    scheduler: Credential
    worker: Credential
    client: Credential
    other_ca: Path
    other_client: Credential  # signed by other_ca, which the cluster does not trust

    def security(self) -> Security:
        return Security(
            tls_ca_file=str(self.ca),
            tls_scheduler_cert=str(self.scheduler.cert),
            tls_scheduler_key=str(self.scheduler.key),
            tls_worker_cert=str(self.worker.cert),
            tls_worker_key=str(self.worker.key),
            tls_client_cert=str(self.client.cert),
            tls_client_key=str(self.client.key),
            require_encryption=True,
        )


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)
    return path


def _write_cert(cert: x509.Certificate, path: Path) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _make_ca(directory: Path, name: str) -> tuple[Path, ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    return _write_cert(cert, directory / f"{name}.pem"), key, cert


def _issue(
    directory: Path, name: str, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate
) -> Credential:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return Credential(_write_cert(cert, directory / f"{name}.pem"), _write_key(key, directory / f"{name}-key.pem"))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    directory = tmp_path_factory.mktemp("pki")
    ca, ca_key, ca_cert = _make_ca(directory, "cluster-ca")
    other_ca, other_key, other_cert = _make_ca(directory, "other-ca")
    return PKI(
        ca=ca,
        scheduler=_issue(directory, "scheduler", ca_key, ca_cert),
        worker=_issue(directory, "worker", ca_key, ca_cert),
        client=_issue(directory, "client", ca_key, ca_cert),
        other_ca=other_ca,
        other_client=_issue(directory, "other-client", other_key, other_cert),
    )


@pytest.fixture(scope="module")
def tls_cluster(pki: PKI) -> Iterator[LocalProcessCluster]:
    with LocalProcessCluster(n_workers=2, threads_per_worker=1, nanny=False, security=pki.security()) as cluster:
        pids = {cluster.scheduler_pid, *cluster.launcher_pids(), *cluster.worker_pids().values()}
        yield cluster
    # Everything the cluster started has exited and been reaped (stop() kills each process group).
    assert len(pids) == 3
    assert not [pid for pid in pids if psutil.pid_exists(pid)]


def _host_port(address: str) -> tuple[str, int]:
    host, port = address.split("://", 1)[1].rsplit(":", 1)
    return host, int(port)


def test_tls_cluster_sketch_equals_sketch_array(tls_cluster: LocalProcessCluster) -> None:
    X = np.random.default_rng(7).normal(size=(3_000, 5)).astype(np.float32)
    rff = srf.RFF(n_features=64, bandwidth=1.5, seed=11)
    with tls_cluster.client() as client:
        workers = client.scheduler_info()["workers"]
        assert tls_cluster.address.startswith("tls://")
        assert len(workers) == 2 and all(address.startswith("tls://") for address in workers)
        result = srf.sketch(X, rff, client=client, chunk_rows=500)
    reference = srf.sketch_array(X, result.feature_map)
    assert result.count == reference.count == X.shape[0]
    assert result.fingerprint == reference.fingerprint
    difference = np.linalg.norm(result.feature_sum - reference.feature_sum)
    assert difference <= 1e-6 * np.linalg.norm(reference.feature_sum)  # norm-wise: sums cancel
    assert result.squared_norm_sum == pytest.approx(reference.squared_norm_sum, rel=1e-6)


def test_tls_cluster_refuses_client_certificate_from_another_ca(tls_cluster: LocalProcessCluster, pki: PKI) -> None:
    # A well-formed TLS client whose certificate the cluster's CA did not sign (and which
    # does not trust the cluster's CA either).
    stranger = Security(
        tls_ca_file=str(pki.other_ca),
        tls_client_cert=str(pki.other_client.cert),
        tls_client_key=str(pki.other_client.key),
        require_encryption=True,
    )
    with pytest.raises(OSError):
        Client(tls_cluster.address, security=stranger, timeout=f"{_REFUSAL_TIMEOUT}s", set_as_default=False)
    # Trusting the cluster's CA does not help a client whose own certificate is foreign: the
    # scheduler aborts the handshake (the client sees an "unknown ca" alert or just an EOF).
    impostor = Security(
        tls_ca_file=str(pki.ca),
        tls_client_cert=str(pki.other_client.cert),
        tls_client_key=str(pki.other_client.key),
        require_encryption=True,
    )
    with pytest.raises(OSError, match="(?i)unknown ca|certificate|eof|reset"):
        Client(tls_cluster.address, security=impostor, timeout=f"{_REFUSAL_TIMEOUT}s", set_as_default=False)


def test_tls_cluster_refuses_client_without_certificate(tls_cluster: LocalProcessCluster, pki: PKI) -> None:
    # distributed cannot even build a client without a certificate (a TypeError about the
    # missing ssl_context), so talk TLS directly: trust the CA, present no certificate. The
    # scheduler must abort the handshake (TLS 1.3 reports it on the first read).
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.check_hostname = False
    host, port = _host_port(tls_cluster.address)
    with pytest.raises(OSError, match="(?i)certificate|alert|reset|eof"):
        with socket.create_connection((host, port), timeout=_REFUSAL_TIMEOUT) as raw:
            with context.wrap_socket(raw) as connection:
                connection.sendall(b"\0" * 8)
                if connection.recv(1) == b"":  # closed without a TLS alert
                    raise ConnectionResetError("connection reset: closed by the scheduler without a TLS alert")
    # And distributed's own client refuses to speak to a tls:// address without TLS settings.
    with pytest.raises(TypeError, match="ssl_context"):
        Client(tls_cluster.address, timeout=f"{_REFUSAL_TIMEOUT}s", set_as_default=False)


def test_tls_cluster_drops_plain_tcp_client(tls_cluster: LocalProcessCluster) -> None:
    host, port = _host_port(tls_cluster.address)
    with pytest.raises(OSError):
        Client(f"tcp://{host}:{port}", timeout=f"{_REFUSAL_TIMEOUT}s", set_as_default=False)


def test_tls_cli_sketch_reads_client_certificate_from_dask_config(
    tls_cluster: LocalProcessCluster, pki: PKI, tmp_path: Path
) -> None:
    # `streamrff sketch --scheduler tls://...` opens its client from the Dask configuration
    # (deploy/tls/README.md): the certificates come from DASK_DISTRIBUTED__COMM__TLS__* variables.
    import zarr

    X = np.random.default_rng(3).normal(size=(1_200, 4)).astype(np.float32)
    source = tmp_path / "rows.zarr"
    stored = zarr.create_array(store=str(source), shape=X.shape, chunks=(300, 4), dtype=X.dtype, zarr_format=3)
    stored[...] = X
    output = tmp_path / "rows.sketch"
    environment = dict(os.environ)
    environment.update(
        {
            "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(pki.ca),
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": str(pki.client.cert),
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": str(pki.client.key),
            "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True",
        }
    )
    completed = subprocess.run(
        [
            sys.executable, "-m", "streamrff.cli", "sketch", str(source),
            "--scheduler", tls_cluster.address, "--features", "32", "--bandwidth", "1.0",
            "-o", str(output), "--json",
        ],
        capture_output=True, text=True, env=environment, timeout=90, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    loaded = srf.load(output)
    assert loaded.count == X.shape[0]
    reference = srf.sketch_array(X, loaded.feature_map)
    difference = np.linalg.norm(loaded.feature_sum - reference.feature_sum)
    assert difference <= 1e-6 * np.linalg.norm(reference.feature_sum)  # norm-wise: sums cancel
