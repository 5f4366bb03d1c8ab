"""Signed pins in the OpenSSF model-signing format (v1.0): the part computable from pins alone. Standard library.

model-signing signs a model folder as an in-toto statement whose resources are `{name, algorithm: sha256,
digest}` per file, in path order, and whose subject digest is a sha256 over those digests; the statement
travels as the payload of a DSSE envelope inside a Sigstore bundle (JSON). A manifest's pins are exactly
those per-file digests, so the catalog builds and compares the statement without reading a weight byte.

Here: the statement of a manifest (bytes laid out as model-signing 1.1.1 writes them), reading a statement
back, the first file where a statement and the pins differ, the manifest's signed subject (every field that can
change what the engine loads), DSSE's pre-authentication encoding, the bundle's JSON both ways (log entries
included), and the trust policy (catalog.yaml, flags, environment). The cryptography is in
resolver/signatures.py; this module never verifies anything by itself.

The subject. The files' digests say which bytes are loaded, not how: `tokenizer:` names another model's files,
`loader:` and `load_format` choose the code path, `hf_repo`/`revision` name what the engine asks for. So a
signature also covers a canonical form of the whole manifest minus `UNSIGNED_FIELDS`, an explicit list of what
cannot change what is loaded: a field added to the schema later is covered unless it is added to that list. It
rides in the statement's predicate under `SUBJECT_KEY` (model-signing reads only `resources` and
`serialization` there, so `model_signing verify` still checks the files), or, for a folder another tool signed,
as one more signed file, `SUBJECT_RESOURCE`, holding the same canonical bytes.
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
from catalog.errors import CatalogError, UsageError

if TYPE_CHECKING:
    from catalog.schema import CatalogSettings, FileEntry, ModelManifest
    from catalog.settings import Settings

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
# Bundles Sigstore's own clients write (keyless signing) spell their media type in one of these ways.
_MEDIA_TYPES = frozenset(
    {
        BUNDLE_MEDIA_TYPE,
        "application/vnd.dev.sigstore.bundle.v0.2+json",
        "application/vnd.dev.sigstore.bundle+json;version=0.3",
        "application/vnd.dev.sigstore.bundle+json;version=0.2",
    }
)
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
    UNCOVERED = "uncovered"  # a valid signature over the files only: the fields that steer the load are not signed


# The manifest fields a signature does not cover: they cannot change which bytes the engine loads or how (the
# description and tags are text; `gpu` only decides where a test runs). Everything else is signed, including any
# field the schema gains later. Per file, the resources carry path and sha256; of the other per-file keys only
# these two are left out: identifiers the Hub lists, informational, never used to fetch or check a byte.
UNSIGNED_FIELDS = ("description", "tags", "gpu")
UNSIGNED_FILE_FIELDS = ("blob_id", "xet_hash")
SUBJECT_KEY = "model_catalog"  # the predicate's key holding the subject
SUBJECT_VERSION = 1
# The subject as a signed file, for a folder signed by another tool (`catalog sign NAME --subject-into DIR` writes it).
SUBJECT_RESOURCE = ".model-catalog-subject.json"


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
    """What a signature says: a model name (informational), every file's sha256, and the manifest's subject (None:
    the signer did not say it in the predicate). (Value types here are NamedTuples: building a frozen dataclass at
    import costs several times more, on every resolve's path.)"""

    model: str
    resources: tuple[Resource, ...]
    subject: Any = None  # the canonical manifest (SUBJECT_KEY), as parsed JSON

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
        if self.subject is not None:
            body["predicate"][SUBJECT_KEY] = {"version": SUBJECT_VERSION, "manifest": self.subject}
        return json.dumps(body, indent=2).encode()


def statement_of(name: str, files: Iterable[FileEntry]) -> Statement:
    """The statement model-signing would make of a folder holding exactly these files (no byte read)."""
    ordered = sorted(files, key=lambda f: path_order(f.path))
    return Statement(name, tuple(Resource(f.path, f.sha256) for f in ordered))


def signed_statement(manifest: ModelManifest) -> Statement:
    """What `catalog sign` signs: the files' statement with the manifest's subject in its predicate."""
    return statement_of(manifest.name, manifest.files)._replace(subject=subject_of(manifest))


def subject_of(manifest: ModelManifest) -> dict[str, Any]:
    """The manifest as signed: every field set to other than its default, minus UNSIGNED_FIELDS (and, per file,
    UNSIGNED_FILE_FIELDS), as JSON values. Defaults are left out so that a field the schema gains later, at its
    default, leaves existing signatures valid, and any value other than the default is covered."""
    data = manifest.model_dump(mode="json", by_alias=True, exclude_defaults=True, exclude=set(UNSIGNED_FIELDS))
    for entry in data.get("files", ()):
        for key in UNSIGNED_FILE_FIELDS:
            entry.pop(key, None)
    return data


def canonical(subject: Any) -> bytes:
    """One byte string per subject value (sorted keys, no spaces, UTF-8): what SUBJECT_RESOURCE holds."""
    return json.dumps(subject, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def subject_difference(statement: Statement, manifest: ModelManifest) -> tuple[Flaw, str, tuple[str, ...]] | None:
    """None when the statement covers the manifest's subject as it is now; else (flaw, what differs, the key path of
    the first difference, empty when there is none to name)."""
    mine = subject_of(manifest)
    if statement.subject is not None:
        if canonical(statement.subject) == canonical(mine):
            return None
        path, theirs, ours = _first_change(statement.subject, mine)
        return (
            Flaw.DIFFERS,
            f"`{'.'.join(path) or SUBJECT_KEY}` is {_shown(ours)} in the manifest but signed as {_shown(theirs)}",
            path,
        )
    signed_file = next((r.digest for r in statement.resources if r.name == SUBJECT_RESOURCE), None)
    if signed_file is not None:
        if signed_file == hashlib.sha256(canonical(mine)).hexdigest():
            return None
        return (
            Flaw.DIFFERS,
            f"the signed {SUBJECT_RESOURCE} is not this manifest's subject (a field that changes "
            "what is loaded was edited after signing)",
            (),
        )
    return (
        Flaw.UNCOVERED,
        "it signs the files only, not the fields that change what the engine loads "
        "(tokenizer, loader, load_format, hf_repo, revision, ...)",
        (),
    )


def _first_change(signed: Any, current: Any, path: tuple[str, ...] = ()) -> tuple[tuple[str, ...], Any, Any]:
    """The first key path (sorted) where two JSON mappings differ, with both values there."""
    if isinstance(signed, dict) and isinstance(current, dict):
        for key in sorted(set(signed) | set(current)):
            if canonical(signed.get(key)) != canonical(current.get(key)):
                return _first_change(signed.get(key), current.get(key), (*path, str(key)))
    return path, signed, current


def _shown(value: Any) -> str:
    return "unset" if value is None else canonical(value).decode()[:120]


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
            raise SignatureFormatError(
                f"predicate type {data.get('predicateType')!r} is not {PREDICATE_TYPE} (model-signing v1.0)"
            )
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
        extra = data["predicate"].get(SUBJECT_KEY)
        subject = None
        if extra is not None:
            if not isinstance(extra, dict) or extra.get("version") != SUBJECT_VERSION or "manifest" not in extra:
                raise SignatureFormatError(
                    f"its predicate's {SUBJECT_KEY} is not version {SUBJECT_VERSION} of a catalog subject"
                )
            subject = extra["manifest"]
        statement = Statement(str(subjects[0]["name"]), tuple(resources), subject)
        claimed = subjects[0]["digest"]["sha256"]
    except (KeyError, TypeError, AttributeError) as exc:
        raise SignatureFormatError(f"the statement lacks {exc} or has the wrong type there") from None
    if claimed != statement.digest:
        raise SignatureFormatError(
            f"the subject digest {claimed} is not the sha256 of its resources' digests ({statement.digest})"
        )
    return statement


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1's pre-authentication encoding: the bytes a DSSE signature is made over."""
    return b"DSSEv1 %d %s %d %s" % (len(payload_type), payload_type.encode(), len(payload), payload)


class LogEntry(NamedTuple):
    """One transparency-log (Rekor) entry of a bundle: what its signed entry timestamp (SET) is made over, and the
    SET itself. resolver/signatures.py checks the SET with a configured log key and the body against the bundle."""

    log_index: int
    log_id: bytes  # sha256 of the log's public key (DER)
    integrated_time: int | None  # seconds since the epoch: when the log took the entry
    body: bytes  # the canonicalized entry body (JSON)
    kind: str  # "dsse", "hashedrekord", ...
    version: str
    promise: bytes | None  # the signed entry timestamp (DER ECDSA), None when the entry carries none

    def set_payload(self) -> bytes:
        """The bytes a SET signs: RFC 8785 JSON of body, integratedTime, logID, logIndex (for this object of
        strings and integers, sorted keys without spaces is RFC 8785)."""
        payload = {
            "body": _b64(self.body),
            "integratedTime": self.integrated_time,
            "logID": self.log_id.hex(),
            "logIndex": self.log_index,
        }
        return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


class Bundle(NamedTuple):
    """A Sigstore bundle holding a DSSE envelope, as model-signing writes and reads it."""

    payload: bytes
    payload_type: str
    signature: bytes  # DER-encoded ECDSA signature of pae(payload_type, payload)
    key_hint: str | None = None  # sha256 hex of the signer's public key PEM (key-based signing)
    certificates: tuple[bytes, ...] = ()  # DER, the signing certificate first (certificate or keyless signing)
    log_entries: tuple[LogEntry, ...] = ()  # Rekor entries (keyless signing)

    @property
    def transparency_log(self) -> bool:
        return bool(self.log_entries)

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
            "dsseEnvelope": {
                "payload": _b64(self.payload),
                "payloadType": self.payload_type,
                "signatures": [{"sig": _b64(self.signature), "keyid": ""}],
            },
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
            certificates = tuple(
                _unb64(c["rawBytes"], "a certificate") for c in material["x509CertificateChain"]["certificates"]
            )
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
            log_entries=tuple(_log_entry(e) for e in material.get("tlogEntries") or ()),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise SignatureFormatError(f"the bundle lacks {exc} or has the wrong type there") from None


def _log_entry(entry: Any) -> LogEntry:
    """A bundle's `tlogEntries` item (protobuf JSON: 64-bit integers as strings, bytes as base64)."""
    try:
        promise = (entry.get("inclusionPromise") or {}).get("signedEntryTimestamp")
        integrated = entry.get("integratedTime")
        return LogEntry(
            log_index=int(entry["logIndex"]),
            log_id=_unb64(entry["logId"]["keyId"], "a log entry's log id"),
            integrated_time=int(integrated) if integrated not in (None, "", "0", 0) else None,
            body=_unb64(entry["canonicalizedBody"], "a log entry's body"),
            kind=str(entry["kindVersion"]["kind"]),
            version=str(entry["kindVersion"]["version"]),
            promise=_unb64(promise, "a signed entry timestamp") if promise is not None else None,
        )
    except ValueError as exc:
        if isinstance(exc, SignatureFormatError):
            raise
        raise SignatureFormatError(f"a log entry's index or time is not an integer ({exc})") from None


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
    """None when the statement names exactly the pinned files with their digests (besides SUBJECT_RESOURCE, which
    `subject_difference` judges); else the first difference."""
    signed = {r.name: r.digest for r in statement.resources if r.name != SUBJECT_RESOURCE}
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
    field: tuple[str, ...] = ()  # the manifest's key path that differs from the signed subject


class Identity(NamedTuple):
    """Who may sign with a certificate: a name the certificate must carry (its subject DN in RFC 4514 form, or one
    of its alternative names: an email, a URI, a DNS name) and the issuer that vouched for it (the certificate's
    OIDC issuer extension, Sigstore's 1.3.6.1.4.1.57264.1.8 or .1.1; a certificate without one: its issuer DN)."""

    identity: str
    issuer: str

    def describe(self) -> str:
        return f"{self.identity} (issuer {self.issuer})"


IDENTITY_SEPARATOR = "|"  # IDENTITY|ISSUER on the command line and in CATALOG_TRUSTED_IDENTITIES


def parse_identity(text: str, what: str) -> Identity:
    """`IDENTITY|ISSUER` -> Identity; UsageError naming `what` when either half is empty."""
    identity, separator, issuer = text.strip().rpartition(IDENTITY_SEPARATOR)
    if not separator or not identity.strip() or not issuer.strip():
        raise UsageError(
            f"{what} {text!r} is not IDENTITY|ISSUER",
            hint="e.g. 'ci@example.org|https://accounts.example.org' (the issuer is the certificate's OIDC "
            "issuer, or its issuer DN when it has none)",
        )
    return Identity(identity.strip(), issuer.strip())


class Policy(NamedTuple):
    """Whether signatures are required and what vouches for them: trusted public keys and CA roots (PEM files), the
    identities a certificate must name, the transparency logs' keys.

    Anchors given on the command line or in the environment replace all of catalog.yaml's and require signatures:
    catalog.yaml is in the same repository as the pins, so a merged change to it must not decide whom a runner
    trusts, nor whether it checks at all."""

    required: bool = False
    keys: tuple[Path, ...] = ()
    roots: tuple[Path, ...] = ()
    origin: str = "catalog.yaml"  # where the anchors came from, for messages
    identities: tuple[Identity, ...] = ()
    log_keys: tuple[Path, ...] = ()
    unchecked_log_entries: bool = False  # accept a log entry no configured log key can check (said explicitly)

    @property
    def anchors(self) -> tuple[Path, ...]:
        return self.keys + self.roots

    @property
    def runner(self) -> bool:
        return self.origin == RUNNER_ORIGIN

    def describe_anchors(self) -> str:
        if not self.anchors:
            return f"no trusted key or root is configured ({self.origin})"
        return f"trusted: {', '.join(str(p) for p in self.anchors)} ({self.origin})"

    def describe_identities(self) -> str:
        if not self.identities:
            return f"no trusted identity is configured ({self.origin})"
        return f"trusted identities: {'; '.join(i.describe() for i in self.identities)} ({self.origin})"


RUNNER_ORIGIN = "--trusted-key/--trusted-root/--trusted-identity/--trusted-log-key or their CATALOG_TRUSTED_* variables"


def policy_of(catalog: CatalogSettings, root: Path, settings: Settings | None) -> Policy:
    """The policy of one invocation: catalog.yaml (paths relative to the manifests folder), with
    --require-signature / CATALOG_REQUIRE_SIGNATURE on top; a runner's own anchors (flags or variables) replace
    catalog.yaml's trust entirely and require signatures, whatever catalog.yaml's `signatures:` says."""
    required = catalog.signatures == "required" or bool(settings and settings.require_signature)
    if settings is not None and (
        settings.trusted_keys or settings.trusted_roots or settings.trusted_identities or settings.trusted_log_keys
    ):
        return Policy(
            True,
            tuple(settings.trusted_keys),
            tuple(settings.trusted_roots),
            RUNNER_ORIGIN,
            tuple(Identity(*i) for i in settings.trusted_identities),
            tuple(settings.trusted_log_keys),
            settings.log_entries == "accept-unchecked",
        )
    return Policy(
        required,
        tuple(root / p for p in catalog.trusted_keys),
        tuple(root / p for p in catalog.trusted_roots),
        identities=tuple(Identity(i.identity, i.issuer) for i in catalog.trusted_identities),
        log_keys=tuple(root / p for p in catalog.trusted_log_keys),
        unchecked_log_entries=(
            settings.log_entries if settings is not None and settings.log_entries else catalog.log_entries
        )
        == "accept-unchecked",
    )


def sign_hint(name: str) -> str:
    return f"review its pins, then run `catalog sign {name} --private-key KEY` and commit {name}{SUFFIX}"
