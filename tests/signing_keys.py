"""Keys and certificate chains for signature tests, made with `cryptography` in a temp folder (never committed)."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CURVES = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1()}


@dataclass(frozen=True)
class KeyPair:
    private: Path  # PEM, PKCS#8, unencrypted
    public: Path  # PEM SubjectPublicKeyInfo


def key_pair(folder: Path, name: str = "signer", curve: str = "P-256") -> KeyPair:
    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(CURVES[curve])
    private, public = folder / f"{name}.key", folder / f"{name}.pub"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return KeyPair(private, public)


@dataclass(frozen=True)
class Chain:
    """An organisation's PKI: a root CA, an intermediate CA, and a signing certificate with its key."""

    root: Path  # the root certificate (what a verifier trusts)
    intermediate: Path
    leaf: Path  # the signing certificate alone
    chain: Path  # the signing certificate, then the intermediate (what `catalog sign --certificate` takes)
    key: Path  # the signing certificate's private key


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


OIDC_ISSUER_V2 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8")  # Sigstore's: a DER UTF8String


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: str,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    code_signing: bool = True,
    digital_signature: bool = True,
    valid: tuple[dt.timedelta, dt.timedelta] = (dt.timedelta(minutes=-5), dt.timedelta(minutes=10)),
    email: str | None = None,
    oidc_issuer: str | None = None,
) -> x509.Certificate:
    """`valid`: not-before and not-after, relative to now. `email`/`oidc_issuer`: a keyless (Fulcio-style) signing
    certificate: no subject, an email alternative name, the OIDC issuer extension."""
    now = dt.datetime.now(dt.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]) if email else _name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + valid[0])
        .not_valid_after(now + valid[1])
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=not ca and code_signing and digital_signature,
                content_commitment=False,
                key_encipherment=not code_signing or not digital_signature,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    )
    if code_signing:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
    if email:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.RFC822Name(email)]), critical=True)
    if oidc_issuer:
        raw = oidc_issuer.encode()
        builder = builder.add_extension(
            x509.UnrecognizedExtension(OIDC_ISSUER_V2, bytes([12, len(raw)]) + raw), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


DAY = dt.timedelta(days=1)
LONG = (-1000 * DAY, 1000 * DAY)


def pki(
    folder: Path,
    name: str = "org",
    *,
    code_signing: bool = True,
    leaf_issuer: str = "intermediate",
    digital_signature: bool = True,
    intermediate_valid: tuple[dt.timedelta, dt.timedelta] = (-3000 * DAY, 3000 * DAY),
    leaf_valid: tuple[dt.timedelta, dt.timedelta] = LONG,
    email: str | None = None,
    oidc_issuer: str | None = None,
) -> Chain:
    """A root (P-384), an intermediate and a signing certificate (P-256). `leaf_issuer="leaf"` makes the signing
    certificate's issuer a non-CA certificate (what a verifier must refuse); the validity windows are relative to
    now (an intermediate that expired, a leaf dated back into it, a short-lived keyless leaf)."""
    folder.mkdir(parents=True, exist_ok=True)
    root_key, mid_key, leaf_key = (
        ec.generate_private_key(ec.SECP384R1()),
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    root = _certificate(f"{name} root", root_key, f"{name} root", root_key, ca=True, valid=(-4000 * DAY, 4000 * DAY))
    if leaf_issuer == "leaf":  # the "intermediate" is an end-entity certificate: it may not issue anything
        intermediate = _certificate(
            f"{name} intermediate", mid_key, f"{name} root", root_key, ca=False, valid=intermediate_valid
        )
    else:
        intermediate = _certificate(
            f"{name} intermediate", mid_key, f"{name} root", root_key, ca=True, valid=intermediate_valid
        )
    leaf = _certificate(
        f"{name} signer",
        leaf_key,
        f"{name} intermediate",
        mid_key,
        ca=False,
        code_signing=code_signing,
        digital_signature=digital_signature,
        valid=leaf_valid,
        email=email,
        oidc_issuer=oidc_issuer,
    )
    paths = Chain(
        folder / f"{name}-root.pem",
        folder / f"{name}-intermediate.pem",
        folder / f"{name}-leaf.pem",
        folder / f"{name}-chain.pem",
        folder / f"{name}-leaf.key",
    )
    paths.root.write_bytes(_pem(root))
    paths.intermediate.write_bytes(_pem(intermediate))
    paths.leaf.write_bytes(_pem(leaf))
    paths.chain.write_bytes(_pem(leaf) + _pem(intermediate))
    paths.key.write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


def pinned_folder(view: Path, target: Path) -> Path:
    """A folder holding exactly a view's files (copies, writable), for model_signing to sign or verify."""
    shutil.copytree(view, target, symlinks=False, copy_function=shutil.copyfile)
    for path in target.rglob("*"):
        if path.is_file():
            os.chmod(path, 0o644)
    return target


# Runs model-signing 1.1.1's CLI (its console script's entry point, `model_signing._cli.main`) once per argument list
# in one process: importing it takes a second or two, each verification of a tiny model milliseconds.
_BATCH = """
import contextlib, io, json, sys
from model_signing._cli import main
results = []
for argv in json.load(sys.stdin):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            main.main(args=argv, prog_name="model_signing")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    results.append([code, out.getvalue()])
print(json.dumps(results))
"""


def model_signing(*calls: list[str], env: dict[str, str] | None = None) -> list[tuple[int, str]]:
    """[(exit code, output)] of `model_signing ARGS...` for each argument list, in order."""
    import json
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _BATCH],
        input=json.dumps([[str(a) for a in c] for c in calls]),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return [(code, output) for code, output in json.loads(done.stdout)]
