"""Signed pins in the OpenSSF model-signing format (v1.0): the part computable from pins alone. Standard library.

model-signing signs a model folder as an in-toto statement whose resources are `{name, algorithm: sha256,
digest}` per file, in path order, and whose subject digest is a sha256 over those digests; the statement
travels as the payload of a DSSE envelope inside a Sigstore bundle (JSON). A manifest's pins are exactly
those per-file digests, so the catalog builds and compares the statement without reading a weight byte.

Here: the statement of a manifest (bytes laid out as model-signing 1.1.1 writes them), reading a statement
back, the first file where a statement and the pins differ, DSSE's pre-authentication encoding, the bundle's
JSON both ways, and the trust policy (catalog.yaml, flags, environment). The cryptography is in
resolver/signatures.py; this module never verifies anything by itself.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from catalog import bounded
from catalog.errors import CatalogError

if TYPE_CHECKING:
    from catalog.schema import CatalogSettings, FileEntry
    from catalog.settings import Settings

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
# Bundles Sigstore's own clients write (keyless signing) spell their media type in one of these ways.
_MEDIA_TYPES = frozenset({BUNDLE_MEDIA_TYPE, "application/vnd.dev.sigstore.bundle.v0.2+json",
                          "application/vnd.dev.sigstore.bundle+json;version=0.3",
                          "application/vnd.dev.sigstore.bundle+json;version=0.2"})
SUFFIX = ".sig"  # <name>.sig beside <name>.yaml: one reviewable file per model
_HEX64 = re.compile(r"[0-9a-f]{64}")
# model-signing hashes a folder with these settings by default; the catalog's statements say the same, so
# `model_signing verify` of a resolved view re-hashes it the way it was signed. `ignore_paths` is left out:
# model-signing writes it in set order (not reproducible) and a view holds exactly the pinned files anyway.
SERIALIZATION = {"allow_symlinks": False, "hash_type": "sha256", "method": "files"}


class SignatureFormatError(CatalogError, ValueError):
    """A signature file that is not a model-signing v1.0 bundle (the message says what is wrong)."""


class Flaw(str, Enum):
    """Why a model's signature does not vouch for its pins."""

    MISSING = "missing"
    UNPARSEABLE = "unparseable"
    UNTRUSTED = "untrusted"
    DIFFERS = "differs"


class SignatureError(CatalogError, ValueError):
    """A model whose signature is missing or does not vouch for its pins: refused before any download."""

    def __init__(self, model: str, signature: str, flaw: Flaw, message: str, *, hint: str) -> None:
        super().__init__(message, hint=hint)
        self.model = model
        self.signature = signature
        self.flaw = flaw


def path_order(path: str) -> tuple[str, ...]:
    """model-signing's order of files: by path components (`a/b` before `a.txt`), as its PurePosixPath sorts."""
    return tuple(path.split("/"))


def signature_path(manifest_path: Path) -> Path:
    """Where a model's signature lives: `<name>.sig` beside `<name>.yaml`."""
    return manifest_path.with_suffix(SUFFIX)


class Resource(NamedTuple):
    name: str
    digest: str  # sha256, lowercase hex


class Statement(NamedTuple):
    """What a signature says: a model name (informational) and every file's sha256. (Value types here are
    NamedTuples: building a frozen dataclass at import costs several times more, on every resolve's path.)"""

    model: str
    resources: tuple[Resource, ...]

    @property
    def digest(self) -> str:
        """The subject digest: sha256 over the resources' digests, in their order."""
        return hashlib.sha256(b"".join(bytes.fromhex(r.digest) for r in self.resources)).hexdigest()

    def payload(self) -> bytes:
        """The statement laid out as model-signing 1.1.1 writes it (protobuf's JSON, two-space indent), in one fixed
        key order (model-signing's own order inside `predicate` follows a protobuf map and varies between runs)."""
        body: dict[str, Any] = {
            "_type": STATEMENT_TYPE,
            "subject": [{"name": self.model, "digest": {"sha256": self.digest}}],
            "predicateType": PREDICATE_TYPE,
            "predicate": {
                "resources": [{"algorithm": "sha256", "name": r.name, "digest": r.digest} for r in self.resources],
                "serialization": SERIALIZATION,
            },
        }
        return json.dumps(body, indent=2).encode()


def statement_of(name: str, files: Iterable[FileEntry]) -> Statement:
    """The statement model-signing would make of a folder holding exactly these files (no byte read)."""
    ordered = sorted(files, key=lambda f: path_order(f.path))
    return Statement(name, tuple(Resource(f.path, f.sha256) for f in ordered))


def parse_statement(payload: bytes) -> Statement:
    """A DSSE payload back into a Statement, with the checks model-signing makes (one subject, sha256 only,
    a subject digest equal to the resources' own). Raises SignatureFormatError saying what is wrong."""
    try:
        data = bounded.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SignatureFormatError(f"its payload is not JSON ({exc})") from None
    try:
        if data.get("_type") != STATEMENT_TYPE:
            raise SignatureFormatError(f"its payload is not an in-toto statement (_type {data.get('_type')!r})")
        if data.get("predicateType") != PREDICATE_TYPE:
            raise SignatureFormatError(f"predicate type {data.get('predicateType')!r} is not {PREDICATE_TYPE} "
                                       "(model-signing v1.0)")
        subjects = data["subject"]
        if not isinstance(subjects, list) or len(subjects) != 1:
            raise SignatureFormatError("the statement must have exactly one subject")
        resources: list[Resource] = []
        seen: set[str] = set()
        for item in data["predicate"]["resources"]:
            name, algorithm, digest = item["name"], item["algorithm"], item["digest"]
            if algorithm != "sha256" or not isinstance(digest, str) or not _HEX64.fullmatch(digest):
                raise SignatureFormatError(f"resource {name!r} is not a sha256 digest (algorithm {algorithm!r})")
            if not isinstance(name, str) or name in seen:
                raise SignatureFormatError(f"resource {name!r} is named twice or is not a path")
            seen.add(name)
            resources.append(Resource(name, digest))
        statement = Statement(str(subjects[0]["name"]), tuple(resources))
        claimed = subjects[0]["digest"]["sha256"]
    except (KeyError, TypeError, AttributeError) as exc:
        raise SignatureFormatError(f"the statement lacks {exc} or has the wrong type there") from None
    if claimed != statement.digest:
        raise SignatureFormatError(f"the subject digest {claimed} is not the sha256 of its resources' digests "
                                   f"({statement.digest})")
    return statement


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1's pre-authentication encoding: the bytes a DSSE signature is made over."""
    return b"DSSEv1 %d %s %d %s" % (len(payload_type), payload_type.encode(), len(payload), payload)


class Bundle(NamedTuple):
    """A Sigstore bundle holding a DSSE envelope, as model-signing writes and reads it."""

    payload: bytes
    payload_type: str
    signature: bytes  # DER-encoded ECDSA signature of pae(payload_type, payload)
    key_hint: str | None = None  # sha256 hex of the signer's public key PEM (key-based signing)
    certificates: tuple[bytes, ...] = ()  # DER, the signing certificate first (certificate or keyless signing)
    transparency_log: bool = False  # carries Rekor entries (keyless signing); not checked here (no network)

    def render(self) -> bytes:
        """The bundle's JSON, byte for byte as model-signing 1.1.1 writes it (compact, its key order)."""
        material: dict[str, Any]
        if self.certificates:
            chain = [{"rawBytes": _b64(c)} for c in self.certificates]
            material = {"x509CertificateChain": {"certificates": chain}, "tlogEntries": []}
        else:
            material = {"publicKey": {"hint": self.key_hint}, "tlogEntries": []}
        body = {
            "mediaType": BUNDLE_MEDIA_TYPE,
            "verificationMaterial": material,
            "dsseEnvelope": {"payload": _b64(self.payload), "payloadType": self.payload_type,
                             "signatures": [{"sig": _b64(self.signature), "keyid": ""}]},
        }
        return json.dumps(body, separators=(",", ":")).encode()


def parse_bundle(data: bytes) -> Bundle:
    """A signature file's bytes -> Bundle. Accepts what model-signing writes (a public-key hint or an X.509
    chain) and Sigstore's keyless bundles (one certificate, log entries). Only the first DSSE signature counts,
    as in model-signing. Raises SignatureFormatError."""
    try:
        body = bounded.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SignatureFormatError(f"not JSON ({exc})") from None
    try:
        media = body.get("mediaType")
        if not isinstance(media, str) or media not in _MEDIA_TYPES:
            raise SignatureFormatError(f"media type {media!r} is not a Sigstore bundle v0.2/v0.3")
        envelope = body["dsseEnvelope"]
        signatures = envelope["signatures"]
        if not isinstance(signatures, list) or not signatures:
            raise SignatureFormatError("its DSSE envelope holds no signature")
        material = body["verificationMaterial"]
        certificates: tuple[bytes, ...] = ()
        if "x509CertificateChain" in material:
            certificates = tuple(_unb64(c["rawBytes"], "a certificate") for c in material["x509CertificateChain"]["certificates"])
        elif "certificate" in material:
            certificates = (_unb64(material["certificate"]["rawBytes"], "the certificate"),)
        hint = (material.get("publicKey") or {}).get("hint") or None
        if not certificates and "publicKey" not in material:
            raise SignatureFormatError("its verification material is neither a public key nor certificates")
        return Bundle(
            payload=_unb64(envelope["payload"], "the payload"),
            payload_type=str(envelope["payloadType"]),
            signature=_unb64(signatures[0]["sig"], "the signature"),
            key_hint=str(hint) if hint is not None else None,
            certificates=certificates,
            transparency_log=bool(material.get("tlogEntries")),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise SignatureFormatError(f"the bundle lacks {exc} or has the wrong type there") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise SignatureFormatError(f"{what} is not base64 text")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureFormatError(f"{what} is not valid base64") from None


class Difference(NamedTuple):
    """The first file, in path order, where a statement and the pins disagree."""

    path: str
    file_index: int | None  # in the manifest's files (None: signed but not pinned)
    pinned: str | None  # sha256, None when not pinned
    signed: str | None  # sha256, None when not signed

    def describe(self) -> str:
        if self.pinned is None:
            return f"{self.path!r} is signed but not pinned (a pinned file was removed or renamed after signing)"
        if self.signed is None:
            return f"{self.path!r} is pinned but not signed (a file was pinned after signing)"
        return f"{self.path!r} is pinned as sha256 {self.pinned} but signed as {self.signed}"


def first_difference(statement: Statement, files: Sequence[FileEntry]) -> Difference | None:
    """None when the statement names exactly the pinned files with their digests; else the first difference."""
    signed = {r.name: r.digest for r in statement.resources}
    pinned = {f.path: (i, f.sha256) for i, f in enumerate(files)}
    for path in sorted(signed.keys() | pinned.keys(), key=path_order):
        index, digest = pinned.get(path, (None, None))
        if digest != signed.get(path):
            return Difference(path, index, digest, signed.get(path))
    return None


class Finding(NamedTuple):
    """Why one model's signature fails, for `validate` (a Problem at file:line) and `resolve` (an error)."""

    flaw: Flaw
    message: str
    difference: Difference | None = None


class Policy(NamedTuple):
    """Whether signatures are required and what vouches for them: trusted public keys and CA roots (PEM files).

    Keys and roots given on the command line or in the environment replace catalog.yaml's: a runner that names
    its own anchors does not let a merged change to catalog.yaml decide whom it trusts."""

    required: bool = False
    keys: tuple[Path, ...] = ()
    roots: tuple[Path, ...] = ()
    origin: str = "catalog.yaml"  # where the anchors came from, for messages

    @property
    def anchors(self) -> tuple[Path, ...]:
        return self.keys + self.roots

    def describe_anchors(self) -> str:
        if not self.anchors:
            return f"no trusted key or root is configured ({self.origin})"
        return f"trusted: {', '.join(str(p) for p in self.anchors)} ({self.origin})"


def policy_of(catalog: CatalogSettings, root: Path, settings: Settings | None) -> Policy:
    """The policy of one invocation: catalog.yaml (paths relative to the manifests folder), with
    --require-signature / CATALOG_REQUIRE_SIGNATURE and --trusted-key/--trusted-root (their variables) on top."""
    required = catalog.signatures == "required" or bool(settings and settings.require_signature)
    if settings is not None and (settings.trusted_keys or settings.trusted_roots):
        return Policy(required, tuple(settings.trusted_keys), tuple(settings.trusted_roots),
                      "--trusted-key/--trusted-root or CATALOG_TRUSTED_KEYS/CATALOG_TRUSTED_ROOTS")
    return Policy(required, tuple(root / p for p in catalog.trusted_keys), tuple(root / p for p in catalog.trusted_roots))


def sign_hint(name: str) -> str:
    return f"review its pins, then run `catalog sign {name} --private-key KEY` and commit {name}{SUFFIX}"
