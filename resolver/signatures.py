"""Signatures over pins (OpenSSF model-signing v1.0): sign a manifest, verify a model's signature against the
trusted keys and CA roots, gate a resolve on it, and remember verifications that held.

What a signature says and how it compares with pins is pure (catalog/signing.py). Here: reading the files,
the cryptography, and the record of past verifications. Key-based signatures verify with the standard
library (resolver/ecdsa.py); signing and certificate chains import `cryptography` inside the functions
that need them (the `signing` extra), so a resolve that checks a key-signed model loads nothing heavy.

A verification that held is recorded in the cache (`signature-checks/<aa>/<key>`) under a key made of what it
compared: the pins (every path and sha256), the signature file's bytes and every trust anchor's bytes. Any
change to one of them is another key, so a record never vouches for anything but what was verified; `gc` drops records older than a
week (the next resolve verifies again, a few milliseconds) and any beyond the newest 10,000.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from catalog import bounded, signing
from catalog.errors import CatalogError, Problem, UsageError
from catalog.loading import ManifestDoc, display_path, load_manifest
from catalog.rules import signature_problem
from catalog.signing import (PAYLOAD_TYPE, Bundle, Finding, Flaw, Policy, SignatureError, SignatureFormatError,
                             Statement, first_difference, parse_bundle, parse_statement, policy_of, signature_path,
                             statement_of)
from resolver.cache import Cache
from resolver import ecdsa
from resolver.fsutil import atomic_write, pid_alive, staging_owner

if TYPE_CHECKING:
    from catalog.lookup import Catalog
    from catalog.schema import ModelManifest
    from catalog.settings import Settings

log = logging.getLogger(__name__)

RECORD_VERSION = 1
MAX_SIGNATURE = 64 * bounded.MiB  # a bundle over 100,000 pins is about 20 MB of base64
INSTALL_HINT = "install the signing extra: pip install 'model-catalog[signing]'"


class TrustConfigError(UsageError):
    """A trust anchor that cannot be used (missing, unreadable, not a supported key or certificate)."""


class Untrusted(ValueError):
    """A well-formed signature that no trusted key or root vouches for."""


class Anchors(NamedTuple):
    """The trust anchors of one policy, read once: public keys (by their model-signing hint) and CA roots."""

    policy: Policy
    keys: tuple[tuple[Path, ecdsa.PublicKey], ...]
    roots: tuple[tuple[Path, bytes], ...]  # PEM; parsed by `cryptography` only when a certificate needs it
    digest: str  # of every anchor's bytes: part of a verification record's key

    def describe(self) -> str:
        return self.policy.describe_anchors()


def load_anchors(policy: Policy) -> Anchors:
    """Read the policy's keys and roots; TrustConfigError when there are none or one cannot be used (named)."""
    if not policy.anchors:
        raise TrustConfigError(f"signatures cannot be checked: {policy.describe_anchors()}",
                               hint="list trusted_keys (or trusted_roots) in catalog.yaml, or pass --trusted-key PUB_PEM")
    keys: list[tuple[Path, ecdsa.PublicKey]] = []
    roots: list[tuple[Path, bytes]] = []
    digest = hashlib.sha256()
    for kind, paths in (("key", policy.keys), ("root", policy.roots)):
        for path in paths:
            data = _read_anchor(path, kind, policy)
            digest.update(f"{kind}\0{len(data)}\0".encode() + data)
            if kind == "key":
                try:
                    keys.append((path, ecdsa.load_public_key(data)))
                except ecdsa.KeyFormatError as exc:
                    raise TrustConfigError(f"trusted key {path} ({policy.origin}): {exc}") from None
            elif b"-----BEGIN CERTIFICATE-----" not in data:
                raise TrustConfigError(f"trusted root {path} ({policy.origin}) holds no PEM certificate")
            else:
                roots.append((path, data))
    return Anchors(policy, tuple(keys), tuple(roots), digest.hexdigest())


def _read_anchor(path: Path, kind: str, policy: Policy) -> bytes:
    try:
        return bounded.read_file(path, bounded.MAX_KEY)  # a regular file of PEM size: never a FIFO or /dev/zero
    except OSError as exc:
        raise TrustConfigError(f"trusted {kind} {path} ({policy.origin}): {exc.strerror or exc}",
                               hint="paths in catalog.yaml are relative to the manifests folder") from None


def verify_bundle(bundle: Bundle, anchors: Anchors) -> tuple[Statement, str]:
    """The statement a bundle signs and who signed it, if a trusted anchor vouches for it.
    Raises Untrusted or SignatureFormatError."""
    if bundle.payload_type != PAYLOAD_TYPE:
        raise SignatureFormatError(f"its payload type is {bundle.payload_type!r}, not {PAYLOAD_TYPE}")
    message = signing.pae(bundle.payload_type, bundle.payload)
    if bundle.certificates:
        key, signer = _certificate_key(bundle, anchors)
        if not key.verify(bundle.signature, message):
            raise Untrusted(f"its signature does not verify with the key of its certificate ({signer}): the payload "
                            "or the signature was altered")
    else:
        candidates = [(p, k) for p, k in anchors.keys if bundle.key_hint in (None, k.hint)]
        if not candidates:
            which = f"the key sha256:{bundle.key_hint}" if bundle.key_hint else "a public key"
            raise Untrusted(f"it was signed with {which}, which is not trusted; {anchors.describe()}")
        good = next(((p, k) for p, k in candidates if k.verify(bundle.signature, message)), None)
        if good is None:
            raise Untrusted(f"its signature does not verify with the trusted key {candidates[0][0]}: the payload or the "
                            "signature was altered" if len(candidates) == 1 else
                            f"its signature verifies with no trusted key; {anchors.describe()}")
        signer = f"key {good[0]}"
    return parse_statement(bundle.payload), signer


def _certificate_key(bundle: Bundle, anchors: Anchors) -> tuple[ecdsa.PublicKey, str]:
    """The signing certificate's key, once its chain reaches a trusted root (checked at the certificate's
    start of validity, as model-signing does: a signature outlives a short-lived certificate)."""
    if not anchors.roots:
        raise Untrusted(f"it was signed with a certificate, and no trusted root is configured; {anchors.describe()}")
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.x509 import verification
    except ImportError:
        raise CatalogError("verifying a certificate-signed model needs the `cryptography` package",
                           hint=INSTALL_HINT) from None
    try:
        leaf = x509.load_der_x509_certificate(bundle.certificates[0])
        intermediates = [x509.load_der_x509_certificate(c) for c in bundle.certificates[1:]]
    except ValueError as exc:
        raise SignatureFormatError(f"a certificate in it cannot be read ({exc})") from None
    store = verification.Store([c for _, pem in anchors.roots for c in x509.load_pem_x509_certificates(pem)])
    # Web PKI rules for the CAs (basic constraints, key usage), except that their extended key usage may name code
    # signing; the signing certificate's use is checked below as model-signing checks it.
    ca_policy = verification.ExtensionPolicy.webpki_defaults_ca().may_be_present(
        x509.ExtendedKeyUsage, verification.Criticality.AGNOSTIC, None)
    verifier = (verification.PolicyBuilder().store(store).time(leaf.not_valid_before_utc)
                .extension_policies(ca_policy=ca_policy, ee_policy=verification.ExtensionPolicy.permit_all())
                .build_client_verifier())
    signer = f"certificate {_identity(leaf)} issued by {leaf.issuer.rfc4514_string()}"
    try:
        verifier.verify(leaf, intermediates)
    except verification.VerificationError as exc:
        raise Untrusted(f"its {signer} does not chain to a trusted root ({exc}); {anchors.describe()}") from None
    if not _may_sign_code(leaf):
        raise Untrusted(f"its {signer} is not for signing (neither key usage digitalSignature nor extended key "
                        "usage codeSigning)")
    pem = leaf.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        return ecdsa.load_public_key(pem), signer
    except ecdsa.KeyFormatError as exc:
        raise Untrusted(f"its {signer} holds {exc}") from None


def _identity(certificate: object) -> str:
    """Who a certificate names: its subject, else (Sigstore's keyless certificates) its alternative names."""
    from cryptography import x509

    assert isinstance(certificate, x509.Certificate)
    if subject := certificate.subject.rfc4514_string():
        return subject
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        return "for " + ", ".join(str(n.value) for n in names)
    except x509.ExtensionNotFound:
        return f"serial {certificate.serial_number}"


def _may_sign_code(certificate: object) -> bool:
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    assert isinstance(certificate, x509.Certificate)
    try:
        if certificate.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature:
            return True
    except x509.ExtensionNotFound:
        pass
    try:
        return ExtendedKeyUsageOID.CODE_SIGNING in certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return False


def vouched(manifest: ModelManifest, manifest_path: Path, anchors: Anchors,
            data: bytes | None = None) -> tuple[Statement | None, Finding | None]:
    """The model's signed statement when a trusted anchor vouches for it and it names exactly the pins; else
    (None, why not). `data`: the signature file's bytes when the caller has read them already."""
    signature = signature_path(manifest_path)
    shown = display_path(signature)
    try:
        data = read_signature(signature) if data is None else data
    except FileNotFoundError:
        return None, Finding(Flaw.MISSING, f"no signature: {shown} does not exist")
    except OSError as exc:
        return None, Finding(Flaw.UNPARSEABLE, f"{shown} cannot be read: {exc.strerror or exc}")
    try:
        statement, _ = verify_bundle(parse_bundle(data), anchors)
    except SignatureFormatError as exc:
        return None, Finding(Flaw.UNPARSEABLE, f"{shown} is not a model-signing v1.0 signature: {exc.message}")
    except Untrusted as exc:
        return None, Finding(Flaw.UNTRUSTED, f"{shown} is not trusted: {exc}")
    difference = first_difference(statement, manifest.files)
    if difference is not None:
        return None, Finding(Flaw.DIFFERS, f"{shown} does not match the pins: {difference.describe()}", difference)
    return statement, None


def read_signature(path: Path) -> bytes:
    """A `<name>.sig`: a regular file beside its manifest, within MAX_SIGNATURE (catalog/bounded.py)."""
    return bounded.read_file(path, MAX_SIGNATURE, root=path.parent)


def check(manifest: ModelManifest, manifest_path: Path, anchors: Anchors) -> Finding | None:
    """Why the model's signature does not vouch for its pins; None when it does."""
    return vouched(manifest, manifest_path, anchors)[1]


class Records:
    """Verifications that held, by what they compared: the pins, the signature's bytes, the anchors' bytes."""

    def __init__(self, cache_root: Path) -> None:
        self.root = Cache(cache_root).signature_checks

    @staticmethod
    def key(manifest: ModelManifest, signature: bytes, anchors: Anchors) -> str:
        pins = statement_of(manifest.name, manifest.files).payload()  # every pinned path and sha256
        parts = [str(RECORD_VERSION), hashlib.sha256(pins).hexdigest(), hashlib.sha256(signature).hexdigest(),
                 anchors.digest]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def path(self, key: str) -> Path:
        return self.root / key[:2] / key

    def holds(self, key: str) -> bool:
        return self.path(key).is_file()

    def note(self, key: str, model: str) -> None:
        try:
            atomic_write(self.path(key), json.dumps({"model": model, "verified_at": time.time()}).encode())
        except OSError as exc:  # a read-only cache only costs the next resolve a verification
            log.debug("cannot record the verification of %s: %s", model, exc)


def require(cat: Catalog, names: Iterable[str], *, cache_root: Path | None, settings: Settings | None) -> tuple[Path, ...]:
    """The resolve gate: when the policy requires signatures, every model in `names` must have one that a trusted
    anchor vouches for and that names exactly its pins; else SignatureError (before any byte is fetched).
    Returns the files the answer now rests on (signatures and anchors), for the warm index."""
    policy = policy_of(cat.settings, cat.root, settings)
    if not policy.required:
        return ()
    anchors = load_anchors(policy)
    records = Records(cache_root) if cache_root is not None else None
    relied: list[Path] = list(policy.anchors)
    for name in dict.fromkeys(n for name in names for n in _with_tokenizer(cat, name)):
        manifest, manifest_path = cat.get(name), cat.sources[name]
        sig = signature_path(manifest_path)
        relied.append(sig)
        try:
            data: bytes | None = read_signature(sig)
        except OSError:
            data = None  # missing or unreadable: `vouched` says which
        key = Records.key(manifest, data, anchors) if data is not None else None
        if key is not None and records is not None and records.holds(key):
            continue
        _, finding = vouched(manifest, manifest_path, anchors, data)  # the very bytes the record is keyed by
        if finding is not None:
            problem = signature_problem(_doc(manifest_path), finding)
            raise SignatureError(name, str(sig), finding.flaw, f"{name}: {problem}; refused before any download",
                                 hint=_hint(name, finding))
        if key is not None and records is not None:
            records.note(key, name)
    return tuple(relied)


def _with_tokenizer(cat: Catalog, name: str) -> tuple[str, ...]:
    """A model and the catalog model whose files serve as its tokenizer: the engine reads both."""
    tokenizer = cat.get(name).tokenizer
    return (name, tokenizer) if tokenizer is not None and tokenizer in cat else (name,)


def _doc(manifest_path: Path) -> ManifestDoc:
    """The manifest with its key lines, to name the line of a differing pin (read again only on failure)."""
    return load_manifest(manifest_path, [])


def _hint(name: str, finding: Finding) -> str:
    if finding.flaw is Flaw.UNTRUSTED:
        return "sign with a trusted key, or trust its key: catalog.yaml trusted_keys, or --trusted-key PUB_PEM"
    if finding.flaw is Flaw.DIFFERS:
        return f"the pins changed after they were signed: restore them, or {signing.sign_hint(name)}"
    return signing.sign_hint(name)


def problems(docs: Sequence[ManifestDoc], catalog_settings_path: Path, policy: Policy) -> list[Problem]:
    """validate's `signature` rule: every model's signature when the policy requires one, else every one present.
    Pure of network; imports `cryptography` only for a certificate-signed model."""
    wanted = [d for d in docs if d.manifest is not None and (policy.required or signature_path(d.path).exists())]
    if not wanted:
        return []
    shown = display_path(catalog_settings_path)
    if not policy.anchors:
        return [Problem(shown, 0, "signatures", f"{len(wanted)} model(s) have or need signatures but "
                        f"{policy.describe_anchors()}; list trusted_keys or trusted_roots", "signature")]
    try:
        anchors = load_anchors(policy)
    except TrustConfigError as exc:
        return [Problem(shown, 0, "trusted_keys", exc.message, "signature")]
    found: list[Problem] = []
    for doc in wanted:
        assert doc.manifest is not None
        try:
            finding = check(doc.manifest, doc.path, anchors)
        except CatalogError as exc:  # e.g. a certificate-signed model without `cryptography` installed
            finding = Finding(Flaw.UNTRUSTED, f"{exc.message}; {exc.hint or ''}".rstrip("; "))
        if finding is not None:
            if finding.flaw is Flaw.MISSING:
                finding = Finding(finding.flaw, f"{finding.message} and signatures are required; "
                                                f"{signing.sign_hint(doc.manifest.name)}")
            found.append(signature_problem(doc, finding))
    return found


def sign(manifest: ModelManifest, private_key: Path, certificate: Path | None = None,
         password: bytes | None = None) -> Bundle:
    """A model-signing v1.0 bundle over the manifest's pins, signed with an EC private key (PEM), with the
    certificate chain (PEM, signing certificate first) when given. Reads no weight byte."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
    except ImportError:
        raise CatalogError("`catalog sign` needs the `cryptography` package", hint=INSTALL_HINT) from None
    try:
        key = serialization.load_pem_private_key(private_key.read_bytes(), password)
    except OSError as exc:
        raise UsageError(f"--private-key {private_key}: {exc.strerror or exc}") from None
    except TypeError:
        raise UsageError(f"--private-key {private_key} is encrypted", hint="run on a terminal to be asked for its "
                         "password, or decrypt it into a file only the signing job can read") from None
    except ValueError as exc:
        raise UsageError(f"--private-key {private_key} is not a PEM private key ({exc})") from None
    hashes_by_curve = {"secp256r1": hashes.SHA256(), "secp384r1": hashes.SHA384(), "secp521r1": hashes.SHA512()}
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name not in hashes_by_curve:
        raise UsageError(f"--private-key {private_key} is not an EC key on P-256, P-384 or P-521 (what model-signing "
                         "supports)", hint="make one with `openssl ecparam -name prime256v1 -genkey -noout -out KEY`")
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    chain: tuple[bytes, ...] = ()
    if certificate is not None:
        try:
            certificates = x509.load_pem_x509_certificates(certificate.read_bytes())
        except OSError as exc:
            raise UsageError(f"--certificate {certificate}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise UsageError(f"--certificate {certificate} holds no PEM certificate ({exc})") from None
        leaf_pem = certificates[0].public_key().public_bytes(serialization.Encoding.PEM,
                                                             serialization.PublicFormat.SubjectPublicKeyInfo)
        if leaf_pem != public_pem:
            raise UsageError(f"the first certificate in {certificate} is not for the key in {private_key}",
                             hint="put the signing certificate first, then its intermediates")
        chain = tuple(c.public_bytes(serialization.Encoding.DER) for c in certificates)
    payload = statement_of(manifest.name, manifest.files).payload()
    signature = key.sign(signing.pae(PAYLOAD_TYPE, payload), ec.ECDSA(hashes_by_curve[key.curve.name]))
    return Bundle(payload, PAYLOAD_TYPE, signature, key_hint=None if chain else hashlib.sha256(public_pem).hexdigest(),
                  certificates=chain)


def write(bundle: Bundle, manifest_path: Path) -> Path:
    """`<name>.sig` beside the manifest, replaced atomically (a reader sees the old signature or the new)."""
    target = signature_path(manifest_path)
    atomic_write(target, bundle.render())
    return target


RECORD_MAX_AGE = 7 * 24 * 3600
RECORD_MAX_COUNT = 10_000


def stale_records(cache_root: Path, now: float) -> list[Path]:
    """Records older than a week and any beyond the newest 10,000, for gc (a live writer's staging file stays)."""
    root = Cache(cache_root).signature_checks
    if not root.is_dir():
        return []
    dated: list[tuple[float, Path]] = []
    stale: list[Path] = []
    for path in root.glob("*/*"):
        owner = staging_owner(path.name)
        if owner is not None and pid_alive(owner):
            continue  # a record being written
        try:
            mtime = path.stat().st_mtime
        except OSError:
            continue
        (stale.append(path) if now - mtime > RECORD_MAX_AGE else dated.append((mtime, path)))
    dated.sort(reverse=True)
    return stale + [p for _, p in dated[RECORD_MAX_COUNT:]]

