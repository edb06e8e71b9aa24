"""Throw-away PKI for one dev cluster: a CA, the API server's serving cert, SA signing keys.

Generated fresh at every start (well under a second with EC keys) so no key ever lives in the
repo. Uses the `openssl` CLI (present on every Debian/Ubuntu image) rather than adding the
`cryptography` package to the project's dependencies.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
SERVING_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
SERVING_IPS = ("127.0.0.1", KUBERNETES_SERVICE_IP)


@dataclass(frozen=True)
class PKI:
    """Paths of the generated material (all inside the run dir's pki/ folder)."""

    dir: Path
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path
    token_file: Path
    admin_token: str
    kubelet_client_cert: Path
    """The API server's client certificate towards kubelets (logs, exec, port-forward):
    O=system:masters, so a kubelet's webhook authorization allows it."""
    kubelet_client_key: Path
    node_token: str
    """The real node's kubelet credential: user ``system:node:<name>`` in ``system:nodes``,
    which the Node authorizer and NodeRestriction confine to its own node and pods."""


def generate(directory: Path, node_name: str = "") -> PKI:
    """Write a CA, a serving cert for 127.0.0.1, the kubelet client cert, an RSA SA key pair
    and the token file (with a token for ``node_name``'s kubelet when one is given)."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    pki = PKI(
        dir=directory,
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
        token_file=directory / "tokens.csv",
        admin_token=secrets.token_hex(24),
        kubelet_client_cert=directory / "kubelet-client.crt",
        kubelet_client_key=directory / "kubelet-client.key",
        node_token=secrets.token_hex(24),
    )
    _generate_openssl(pki)
    # token,user,uid,"group1,group2": system:masters bypasses RBAC for the harness itself.
    lines = [f'{pki.admin_token},admin,admin,"system:masters"']
    if node_name:
        user = f"system:node:{node_name}"
        lines.append(f'{pki.node_token},{user},{user},"system:nodes"')
    pki.token_file.write_text("\n".join(lines) + "\n")
    for path in directory.iterdir():
        path.chmod(0o600)
    return pki


def _generate_openssl(pki: PKI) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the `openssl` CLI is needed to generate the dev cluster's keys")

    def run(*args: str) -> None:
        proc = subprocess.run([openssl, *args], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"openssl {' '.join(args)} failed: {proc.stderr.strip()}")

    def ec_key(path: Path) -> None:
        run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))

    ec_key(pki.ca_key)
    run(
        "req", "-x509", "-new", "-key", str(pki.ca_key), "-subj", "/CN=mlmodelscope-dev-ca",
        "-days", "3650", "-sha256", "-out", str(pki.ca_cert),
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    )  # fmt: skip

    def signed(key: Path, cert: Path, subject: str, extensions: str) -> None:
        ec_key(key)
        with tempfile.TemporaryDirectory() as tmp:
            csr, ext = Path(tmp) / "leaf.csr", Path(tmp) / "ext.cnf"
            ext.write_text(
                f"{extensions}keyUsage=critical,digitalSignature,keyEncipherment\n"
                "authorityKeyIdentifier=keyid\n"
            )
            run("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
            run(
                "x509", "-req", "-in", str(csr), "-CA", str(pki.ca_cert),
                "-CAkey", str(pki.ca_key), "-set_serial", str(secrets.randbits(63)),
                "-days", "365", "-sha256", "-extfile", str(ext), "-out", str(cert),
            )  # fmt: skip

    sans = [f"DNS:{n}" for n in SERVING_DNS_NAMES] + [f"IP:{ip}" for ip in SERVING_IPS]
    signed(
        pki.serving_key,
        pki.serving_cert,
        "/CN=kube-apiserver",
        f"subjectAltName={','.join(sans)}\nextendedKeyUsage=serverAuth\n",
    )
    signed(
        pki.kubelet_client_key,
        pki.kubelet_client_cert,
        "/O=system:masters/CN=kube-apiserver-kubelet-client",
        "extendedKeyUsage=clientAuth\n",
    )
    run("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(pki.sa_key))
    run("pkey", "-in", str(pki.sa_key), "-pubout", "-out", str(pki.sa_pub))
