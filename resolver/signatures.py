"""Signatures over pins (OpenSSF model-signing v1.0): sign a manifest, verify a model's signature against the
trusted keys, CA roots, identities and transparency-log keys, and gate a resolve on it.

What a signature says and how it compares with pins is pure (catalog/signing.py). Here: reading the files and
the cryptography. Key-based signatures verify with the standard library (resolver/ecdsa.py); signing and
certificate chains import `cryptography` inside the functions that need them (the `signing` extra), so a resolve
that checks a key-signed model loads nothing heavy.

Nothing here is remembered across processes. A verdict kept in the cache would be trusted by whoever can write
the cache (a pull request's job on a persistent runner), and no key the runner holds is out of that job's reach:
so every process verifies again (a key signature: a few ms of ECDSA; a certificate chain: `cryptography`'s load,
tens of ms, paid by a cold resolve only: the warm path re-hashes the signature and anchor files instead). Within
one process a verification is kept in memory, keyed by the signature's bytes and the anchors' bytes.

Certificates. The chain is evaluated now for every issuing certificate (an issuer's validity is not the signer's
to choose). The signing certificate is evaluated at the time its signature was made only when a transparency-log
entry whose signed entry timestamp a trusted log key made proves that time (a Sigstore certificate lives ten
minutes: without such proof it fails, as it should, since nothing else says it signed while valid); otherwise
now. It must carry key usage digitalSignature and extended key usage codeSigning, and name a configured identity
with its issuer (a root vouches for everyone it issues to).
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from catalog import bounded, signing
from catalog.errors import CatalogError, Problem, UsageError
from catalog.loading import ManifestDoc, display_path, load_manifest
from catalog.rules import signature_problem
from catalog.signing import (
    PAYLOAD_TYPE,
    SUBJECT_RESOURCE,
    Bundle,
    Finding,
    Flaw,
    Policy,
    SignatureError,
    SignatureFormatError,
    Statement,
    first_difference,
    parse_bundle,
    parse_statement,
    policy_of,
    signature_path,
    signed_statement,
    subject_difference,
)
from resolver import ecdsa
from resolver.fsutil import atomic_write, pid_alive, staging_owner

if TYPE_CHECKING:
    from catalog.lookup import Catalog
    from catalog.schema import ModelManifest
    from catalog.settings import Settings


MAX_SIGNATURE = 64 * bounded.MiB  # a bundle over 100,000 pins is about 20 MB of base64
INSTALL_HINT = "install the signing extra: pip install 'model-catalog[signing]'"
# Sigstore's OIDC issuer extensions: the v2 one holds a DER UTF8String, the legacy one the raw text.
_OIDC_ISSUER_V2 = "1.3.6.1.4.1.57264.1.8"
_OIDC_ISSUER_V1 = "1.3.6.1.4.1.57264.1.1"


class TrustConfigError(UsageError):
    """A trust anchor that cannot be used (missing, unreadable, not a supported key or certificate)."""


class Untrusted(ValueError):
    """A well-formed signature that no trusted key or root vouches for."""


class Anchors(NamedTuple):
    """The trust anchors of one policy, read once: public keys (every key of each file), CA roots, log keys."""

    policy: Policy
    keys: tuple[tuple[Path, ecdsa.PublicKey], ...]
    roots: tuple[tuple[Path, bytes], ...]  # PEM; parsed by `cryptography` only when a certificate needs it
    digest: str  # of every anchor's bytes and the identities: what an in-process verdict is keyed by
    log_keys: tuple[tuple[Path, ecdsa.PublicKey], ...] = ()

    def describe(self) -> str:
        return self.policy.describe_anchors()


def load_anchors(policy: Policy) -> Anchors:
    """Read the policy's keys, roots and log keys; TrustConfigError when there is no key or root or one cannot be
    used (named)."""
    if not policy.anchors:
        raise TrustConfigError(
            f"signatures cannot be checked: {policy.describe_anchors()}",
            hint="list trusted_keys (or trusted_roots) in catalog.yaml, or pass --trusted-key PUB_PEM",
        )
    keys: list[tuple[Path, ecdsa.PublicKey]] = []
    log_keys: list[tuple[Path, ecdsa.PublicKey]] = []
    roots: list[tuple[Path, bytes]] = []
    digest = hashlib.sha256(json.dumps([list(i) for i in policy.identities]).encode())
    for kind, paths in (("key", policy.keys), ("root", policy.roots), ("log key", policy.log_keys)):
        for path in paths:
            data = _read_anchor(path, kind, policy)
            digest.update(f"{kind}\0{len(data)}\0".encode() + data)
            if kind == "root":
                if b"-----BEGIN CERTIFICATE-----" not in data:
                    raise TrustConfigError(f"trusted root {path} ({policy.origin}) holds no PEM certificate")
                roots.append((path, data))
                continue
            try:
                found = ecdsa.load_public_keys(data)
            except ecdsa.KeyFormatError as exc:
                raise TrustConfigError(f"trusted {kind} {path} ({policy.origin}): {exc}") from None
            (keys if kind == "key" else log_keys).extend((path, k) for k in found)
    return Anchors(policy, tuple(keys), tuple(roots), digest.hexdigest(), tuple(log_keys))


def _read_anchor(path: Path, kind: str, policy: Policy) -> bytes:
    try:
        return bounded.read_file(path, bounded.MAX_KEY)  # a regular file of PEM size: never a FIFO or /dev/zero
    except OSError as exc:
        raise TrustConfigError(
            f"trusted {kind} {path} ({policy.origin}): {exc.strerror or exc}",
            hint="paths in catalog.yaml are relative to the manifests folder",
        ) from None


def verify_bundle(bundle: Bundle, anchors: Anchors, now: float | None = None) -> tuple[Statement, str]:
    """The statement a bundle signs and who signed it, if a trusted anchor vouches for it (at `now`, default the
    clock). Raises Untrusted or SignatureFormatError."""
    if bundle.payload_type != PAYLOAD_TYPE:
        raise SignatureFormatError(f"its payload type is {bundle.payload_type!r}, not {PAYLOAD_TYPE}")
    now = time.time() if now is None else now
    message = signing.pae(bundle.payload_type, bundle.payload)
    if bundle.certificates:
        key, signer = _certificate_key(bundle, anchors, now)
        if not key.verify(bundle.signature, message):
            raise Untrusted(
                f"its signature does not verify with the key of its certificate ({signer}): the payload "
                "or the signature was altered"
            )
    else:
        candidates = [(p, k) for p, k in anchors.keys if bundle.key_hint in (None, k.hint)]
        if not candidates:
            which = f"the key sha256:{bundle.key_hint}" if bundle.key_hint else "a public key"
            raise Untrusted(f"it was signed with {which}, which is not trusted; {anchors.describe()}")
        good = next(((p, k) for p, k in candidates if k.verify(bundle.signature, message)), None)
        if good is None:
            raise Untrusted(
                f"its signature does not verify with the trusted key {candidates[0][0]}: the payload or the "
                "signature was altered"
                if len(candidates) == 1
                else f"its signature verifies with no trusted key; {anchors.describe()}"
            )
        signer = f"key {good[0]}"
        if bundle.log_entries:  # a key-signed bundle that was logged: its entries are checked all the same
            _log_time(bundle, anchors, base64.b64encode(good[1].pem()).decode())
    return parse_statement(bundle.payload), signer


def _certificate_key(bundle: Bundle, anchors: Anchors, now: float) -> tuple[ecdsa.PublicKey, str]:
    """The signing certificate's key, once its chain reaches a trusted root (see the module's docstring for the
    times), its usage allows code signing, and it names a trusted identity and issuer."""
    policy = anchors.policy
    if not anchors.roots:
        raise Untrusted(
            f"it was signed with a certificate, and no trusted root is configured; {anchors.describe()}; "
            "list trusted_roots in catalog.yaml, or pass --trusted-root CA_PEM"
        )
    if not policy.identities:
        raise Untrusted(
            "it was signed with a certificate, and no identity is configured: a root vouches for everyone "
            f"it issues to ({policy.describe_identities()}); list trusted_identities (identity and issuer) in "
            "catalog.yaml, or pass --trusted-identity 'IDENTITY|ISSUER'"
        )
    try:
        import datetime as dt

        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.x509 import verification
    except ImportError:
        raise CatalogError(
            "verifying a certificate-signed model needs the `cryptography` package", hint=INSTALL_HINT
        ) from None
    try:
        leaf = x509.load_der_x509_certificate(bundle.certificates[0])
        intermediates = [x509.load_der_x509_certificate(c) for c in bundle.certificates[1:]]
    except ValueError as exc:
        raise SignatureFormatError(f"a certificate in it cannot be read ({exc})") from None
    signer = f"certificate {_identity(leaf)} issued by {leaf.issuer.rfc4514_string()}"
    when = dt.datetime.fromtimestamp(now, dt.timezone.utc)
    for issuer in intermediates:  # an issuer's validity is not the signer's to choose: now, whatever the leaf's dates
        if not issuer.not_valid_before_utc <= when <= issuer.not_valid_after_utc:
            raise Untrusted(
                f"its issuing certificate {issuer.subject.rfc4514_string()} is not valid now (valid "
                f"{_utc(issuer.not_valid_before_utc)} to {_utc(issuer.not_valid_after_utc)}): issuing "
                "certificates are checked at verification time"
            )
    verifier_pem = base64.b64encode(leaf.public_bytes(serialization.Encoding.PEM)).decode()
    signed_at = _log_time(bundle, anchors, verifier_pem) if bundle.log_entries else None
    at = dt.datetime.fromtimestamp(signed_at if signed_at is not None else now, dt.timezone.utc)
    store = verification.Store([c for _, pem in anchors.roots for c in x509.load_pem_x509_certificates(pem)])
    # Web PKI rules for the CAs (basic constraints, key usage), except that their extended key usage may name code
    # signing; the signing certificate's use is checked below, as Sigstore's verifiers check it.
    ca_policy = verification.ExtensionPolicy.webpki_defaults_ca().may_be_present(
        x509.ExtendedKeyUsage, verification.Criticality.AGNOSTIC, None
    )
    verifier = (
        verification.PolicyBuilder()
        .store(store)
        .time(at)
        .extension_policies(ca_policy=ca_policy, ee_policy=verification.ExtensionPolicy.permit_all())
        .build_client_verifier()
    )
    try:
        chain = verifier.verify(leaf, intermediates).chain
    except verification.VerificationError as exc:
        expired = not leaf.not_valid_before_utc <= at <= leaf.not_valid_after_utc
        why = (
            f"its {signer} was not valid at {_utc(at)} (valid {_utc(leaf.not_valid_before_utc)} to "
            f"{_utc(leaf.not_valid_after_utc)})"
            if expired
            else f"its {signer} does not chain to a trusted root ({exc}); {anchors.describe()}"
        )
        if expired and signed_at is None:
            why += (
                "; no transparency-log entry proves when it signed, so it is checked now (a short-lived "
                "certificate verifies only with a log entry a trusted log key checks: trusted_log_keys)"
            )
        raise Untrusted(why) from None
    for issuer in chain[1:]:  # and the root (the intermediates were checked above)
        if not issuer.not_valid_before_utc <= when <= issuer.not_valid_after_utc:
            raise Untrusted(
                f"its issuing certificate {issuer.subject.rfc4514_string()} is not valid now (valid "
                f"{_utc(issuer.not_valid_before_utc)} to {_utc(issuer.not_valid_after_utc)}): issuing "
                "certificates are checked at verification time"
            )
    _check_usage(leaf, signer)
    _check_identity(leaf, policy)
    pem = leaf.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        return ecdsa.load_public_key(pem), signer
    except ecdsa.KeyFormatError as exc:
        raise Untrusted(f"its {signer} holds {exc}") from None


def _utc(when: Any) -> str:
    return f"{when:%Y-%m-%d %H:%M:%S} UTC"


def _log_time(bundle: Bundle, anchors: Anchors, verifier: str) -> int | None:
    """When the bundle's log entries prove it was signed (the earliest integrated time), after checking each one's
    signed entry timestamp with a trusted log key and its body against this bundle; None when the policy accepts
    entries unchecked and no log key is configured. `verifier`: base64 of the signer's PEM, as the entry records it."""
    policy = anchors.policy
    if not anchors.log_keys:
        if policy.unchecked_log_entries:
            return None
        raise Untrusted(
            f"it carries transparency-log entries, and log entries are not checkable here: no log key is "
            f"configured ({policy.origin}); list trusted_log_keys (the log's public key, PEM) in catalog.yaml "
            "or pass --trusted-log-key, or set `log_entries: accept-unchecked` to accept them unchecked"
        )
    times: list[int] = []
    for entry in bundle.log_entries:
        key = next((k for _, k in anchors.log_keys if hashlib.sha256(k.der()).digest() == entry.log_id), None)
        if key is None:
            raise Untrusted(
                f"its log entry {entry.log_index} is from a log whose key is not trusted (log id "
                f"{entry.log_id.hex()}); trusted log keys: {', '.join(str(p) for p, _ in anchors.log_keys)}"
            )
        if entry.promise is None or entry.integrated_time is None:
            raise Untrusted(
                f"its log entry {entry.log_index} carries no signed entry timestamp, and log entries are not "
                "checkable here without one (inclusion proofs are not checked)"
            )
        if not key.verify(entry.promise, entry.set_payload()):
            raise Untrusted(
                f"the signed entry timestamp of its log entry {entry.log_index} does not verify with the "
                "trusted log key: the entry was altered"
            )
        _check_entry_body(entry, bundle, verifier)
        times.append(entry.integrated_time)
    return min(times)


def _check_entry_body(entry: signing.LogEntry, bundle: Bundle, verifier: str) -> None:
    """A logged entry vouches for this bundle only if it records this payload, this signature and this signer."""
    if (entry.kind, entry.version) != ("dsse", "0.0.1"):
        raise Untrusted(
            f"its log entry {entry.log_index} is of kind {entry.kind} {entry.version}; log entries are not "
            "checkable here except dsse 0.0.1 (what model-signing logs)"
        )
    try:
        body: Any = json.loads(entry.body)
        spec = body["spec"]
        payload_hash = spec["payloadHash"]
        recorded = spec["signatures"]
    except (ValueError, KeyError, TypeError) as exc:
        raise Untrusted(f"its log entry {entry.log_index} has no readable dsse body ({exc})") from None
    if body.get("kind") != "dsse" or payload_hash != {
        "algorithm": "sha256",
        "value": hashlib.sha256(bundle.payload).hexdigest(),
    }:
        raise Untrusted(
            f"its log entry {entry.log_index} is for other bytes: the payload it records is not this bundle's"
        )
    if recorded != [{"signature": base64.b64encode(bundle.signature).decode(), "verifier": verifier}]:
        raise Untrusted(f"its log entry {entry.log_index} records another signature or signer than this bundle's")


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


def _check_usage(certificate: object, signer: str) -> None:
    """Key usage digitalSignature and extended key usage codeSigning, both present (as Sigstore requires)."""
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    assert isinstance(certificate, x509.Certificate)
    try:
        usage = certificate.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        raise Untrusted(f"its {signer} has no key usage (digitalSignature is required)") from None
    if not usage.digital_signature:
        raise Untrusted(f"its {signer} is not for signing: its key usage lacks digitalSignature")
    try:
        extended = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        raise Untrusted(f"its {signer} has no extended key usage (codeSigning is required)") from None
    if ExtendedKeyUsageOID.CODE_SIGNING not in extended:
        raise Untrusted(f"its {signer} is not for signing code: its extended key usage lacks codeSigning")


def names_and_issuer(certificate: object) -> tuple[list[str], str]:
    """The names a certificate carries (subject DN, then alternative names) and who vouched for them: its OIDC
    issuer extension, else its issuer DN."""
    from cryptography import x509

    assert isinstance(certificate, x509.Certificate)
    names = [subject] if (subject := certificate.subject.rfc4514_string()) else []
    try:
        alternative = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names += [
            str(n.value)
            for n in alternative
            if isinstance(n, (x509.RFC822Name, x509.UniformResourceIdentifier, x509.DNSName))
        ]
    except x509.ExtensionNotFound:
        pass
    issuer = certificate.issuer.rfc4514_string()
    for oid in (_OIDC_ISSUER_V2, _OIDC_ISSUER_V1):
        try:
            raw = certificate.extensions.get_extension_for_oid(x509.ObjectIdentifier(oid)).value
        except x509.ExtensionNotFound:
            continue
        value = raw.value if isinstance(raw, x509.UnrecognizedExtension) else b""
        if oid == _OIDC_ISSUER_V2:  # a DER UTF8String: tag 12, a one-byte length (issuer URLs are short)
            value = value[2:] if len(value) >= 2 and value[0] == 12 and value[1] == len(value) - 2 else b""
        try:
            issuer = value.decode()
        except UnicodeDecodeError:
            issuer = ""
        if not issuer:
            raise Untrusted(f"its certificate's OIDC issuer extension {oid} cannot be read")
        break
    return names, issuer


def _check_identity(certificate: object, policy: Policy) -> None:
    names, issuer = names_and_issuer(certificate)
    named = [i for i in policy.identities if i.identity in names]
    if not named:
        raise Untrusted(
            f"its certificate names {', '.join(names) or 'nobody'} (issuer {issuer}), none of them a trusted "
            f"identity; {policy.describe_identities()}"
        )
    if not any(i.issuer == issuer for i in named):
        raise Untrusted(
            f"its certificate for {named[0].identity} was issued through {issuer}, not a trusted issuer "
            f"of that identity ({', '.join(i.issuer for i in named)}); {policy.describe_identities()}"
        )


_VERIFIED: dict[tuple[str, str], tuple[Statement, str]] = {}  # (signature sha256, anchors digest) -> verdict


def vouched(
    manifest: ModelManifest, manifest_path: Path, anchors: Anchors, data: bytes | None = None
) -> tuple[Statement | None, Finding | None]:
    """The model's signed statement when a trusted anchor vouches for it and it covers exactly the pins and the
    manifest's subject; else (None, why not). `data`: the signature file's bytes when the caller has read them."""
    statement, _, finding = vouched_by(manifest, manifest_path, anchors, data)
    return statement, finding


def vouched_by(
    manifest: ModelManifest, manifest_path: Path, anchors: Anchors, data: bytes | None = None
) -> tuple[Statement | None, str | None, Finding | None]:
    """`vouched`, with who signed (None when not vouched for)."""
    signature = signature_path(manifest_path)
    shown = display_path(signature)
    try:
        data = read_signature(signature) if data is None else data
    except FileNotFoundError:
        return None, None, Finding(Flaw.MISSING, f"no signature: {shown} does not exist")
    except OSError as exc:
        return None, None, Finding(Flaw.UNPARSEABLE, f"{shown} cannot be read: {exc.strerror or exc}")
    key = (hashlib.sha256(data).hexdigest(), anchors.digest)
    try:
        if key not in _VERIFIED:  # memory only: a verdict from outside this process is never taken
            _VERIFIED[key] = verify_bundle(parse_bundle(data), anchors)
        statement, signer = _VERIFIED[key]
    except SignatureFormatError as exc:
        return None, None, Finding(Flaw.UNPARSEABLE, f"{shown} is not a model-signing v1.0 signature: {exc.message}")
    except Untrusted as exc:
        return None, None, Finding(Flaw.UNTRUSTED, f"{shown} is not trusted: {exc}")
    difference = first_difference(statement, manifest.files)
    if difference is not None:
        return (
            None,
            None,
            Finding(Flaw.DIFFERS, f"{shown} does not match the pins: {difference.describe()}", difference),
        )
    uncovered = subject_difference(statement, manifest)
    if uncovered is not None:
        flaw, what, where = uncovered
        return None, None, Finding(flaw, f"{shown} does not cover the manifest: {what}", field=where)
    return statement, signer, None


def read_signature(path: Path) -> bytes:
    """A `<name>.sig`: a regular file beside its manifest, within MAX_SIGNATURE (catalog/bounded.py)."""
    return bounded.read_file(path, MAX_SIGNATURE, root=path.parent)


def check(manifest: ModelManifest, manifest_path: Path, anchors: Anchors) -> Finding | None:
    """Why the model's signature does not vouch for its pins; None when it does."""
    return vouched(manifest, manifest_path, anchors)[1]


def require(
    cat: Catalog,
    names: Iterable[str],
    *,
    settings: Settings | None,
    anchors: Anchors | None = None,
    cache_root: Path | None = None,
) -> tuple[Path, ...]:
    """The resolve gate: when the policy requires signatures, every model in `names` must have one that a trusted
    anchor vouches for and that covers exactly its pins and its subject; else SignatureError (before any byte is
    fetched). Returns the files the answer now rests on (signatures and anchors), for the warm index. `anchors`: the
    policy's, when the caller read them already (a command reads them once); else read here.
    `cache_root` is not used (no verdict is kept on disk); it stays for callers' sake."""
    policy = policy_of(cat.settings, cat.root, settings)
    if not policy.required:
        return ()
    anchors = anchors if anchors is not None else load_anchors(policy)
    relied: list[Path] = [*policy.anchors, *policy.log_keys]
    for name in dict.fromkeys(n for asked in names for n in _with_tokenizer(cat, asked)):
        manifest, manifest_path = cat.get(name), cat.sources[name]
        sig = signature_path(manifest_path)
        relied.append(sig)
        _, finding = vouched(manifest, manifest_path, anchors)
        if finding is not None:
            problem = signature_problem(_doc(manifest_path), finding)
            raise SignatureError(
                name,
                str(sig),
                finding.flaw,
                f"{name}: {problem}; refused before any download",
                hint=_hint(name, finding),
            )
    return tuple(relied)


def verdict(cat: Catalog, name: str, settings: Settings | None) -> str:
    """One line for a bill of materials: who signed the model's pins as the policy checks them, or why nothing
    was checked. Verifies (in memory, as `require` does) when the policy requires signatures."""
    policy = policy_of(cat.settings, cat.root, settings)
    if not policy.required:
        return "not checked: signatures are not required"
    _, signer, finding = vouched_by(cat.get(name), cat.sources[name], load_anchors(policy))
    return f"verified: signed by {signer}" if finding is None else f"refused: {finding.message}"


def _with_tokenizer(cat: Catalog, name: str) -> tuple[str, ...]:
    """A model and the catalog model whose files serve as its tokenizer: the engine reads both."""
    tokenizer = cat.get(name).tokenizer
    return (name, tokenizer) if tokenizer is not None and tokenizer in cat else (name,)


def _doc(manifest_path: Path) -> ManifestDoc:
    """The manifest with its key lines, to name the line of a differing pin (read again only on failure)."""
    return load_manifest(manifest_path, [])


def _hint(name: str, finding: Finding) -> str:
    if finding.flaw is Flaw.UNTRUSTED:
        return (
            "sign with a trusted key, or trust its signer: catalog.yaml trusted_keys / trusted_roots and "
            "trusted_identities, or --trusted-key PUB_PEM"
        )
    if finding.flaw is Flaw.DIFFERS:
        return f"the manifest changed after it was signed: restore it, or {signing.sign_hint(name)}"
    if finding.flaw is Flaw.UNCOVERED:
        return (
            f"{signing.sign_hint(name)}; or, signing a folder with another tool, put the file `catalog sign {name} "
            f"--subject-into DIR` writes ({SUBJECT_RESOURCE}) among the files it signs"
        )
    return signing.sign_hint(name)


def problems(docs: Sequence[ManifestDoc], catalog_settings_path: Path, policy: Policy) -> list[Problem]:
    """validate's `signature` rule: every model's signature when the policy requires one, else every one present.
    Pure of network; imports `cryptography` only for a certificate-signed model."""
    wanted = [d for d in docs if d.manifest is not None and (policy.required or signature_path(d.path).exists())]
    if not wanted:
        return []
    shown = display_path(catalog_settings_path)
    if not policy.anchors:
        return [
            Problem(
                shown,
                0,
                "signatures",
                f"{len(wanted)} model(s) have or need signatures but "
                f"{policy.describe_anchors()}; list trusted_keys or trusted_roots",
                "signature",
            )
        ]
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
                finding = Finding(
                    finding.flaw,
                    f"{finding.message} and signatures are required; {signing.sign_hint(doc.manifest.name)}",
                )
            found.append(signature_problem(doc, finding))
    return found


def sign(
    manifest: ModelManifest, private_key: Path, certificate: Path | None = None, password: bytes | None = None
) -> Bundle:
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
        raise UsageError(
            f"--private-key {private_key} is encrypted",
            hint="run on a terminal to be asked for its "
            "password, or decrypt it into a file only the signing job can read",
        ) from None
    except ValueError as exc:
        raise UsageError(f"--private-key {private_key} is not a PEM private key ({exc})") from None
    hashes_by_curve = {"secp256r1": hashes.SHA256(), "secp384r1": hashes.SHA384(), "secp521r1": hashes.SHA512()}
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name not in hashes_by_curve:
        raise UsageError(
            f"--private-key {private_key} is not an EC key on P-256, P-384 or P-521 (what model-signing supports)",
            hint="make one with `openssl ecparam -name prime256v1 -genkey -noout -out KEY`",
        )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    chain: tuple[bytes, ...] = ()
    if certificate is not None:
        try:
            certificates = x509.load_pem_x509_certificates(certificate.read_bytes())
        except OSError as exc:
            raise UsageError(f"--certificate {certificate}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise UsageError(f"--certificate {certificate} holds no PEM certificate ({exc})") from None
        leaf_pem = (
            certificates[0]
            .public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        if leaf_pem != public_pem:
            raise UsageError(
                f"the first certificate in {certificate} is not for the key in {private_key}",
                hint="put the signing certificate first, then its intermediates",
            )
        chain = tuple(c.public_bytes(serialization.Encoding.DER) for c in certificates)
    payload = signed_statement(manifest).payload()
    signature = key.sign(signing.pae(PAYLOAD_TYPE, payload), ec.ECDSA(hashes_by_curve[key.curve.name]))
    return Bundle(
        payload,
        PAYLOAD_TYPE,
        signature,
        key_hint=None if chain else hashlib.sha256(public_pem).hexdigest(),
        certificates=chain,
    )


def write_subject(manifest: ModelManifest, folder: Path) -> Path:
    """The model's subject as the file another tool signs among the pinned files (SUBJECT_RESOURCE in `folder`)."""
    target = folder / SUBJECT_RESOURCE
    try:
        atomic_write(target, signing.canonical(signing.subject_of(manifest)))
    except OSError as exc:
        raise UsageError(f"--subject-into {folder}: {exc.strerror or exc}") from None
    return target


def write(bundle: Bundle, manifest_path: Path) -> Path:
    """`<name>.sig` beside the manifest, replaced atomically (a reader sees the old signature or the new)."""
    target = signature_path(manifest_path)
    atomic_write(target, bundle.render())
    return target


def stale_records(root: Path) -> list[Path]:
    """Every file under `signature-checks/`, for gc: verdicts earlier versions kept there are never read now (a
    verdict in the cache would be trusted by whoever can write it), so all of them go (a live writer's staging file
    stays). `root`: the cache's `signature_checks` folder."""
    if not root.is_dir():
        return []
    return [
        path for path in sorted(root.glob("*/*")) if (owner := staging_owner(path.name)) is None or not pid_alive(owner)
    ]
