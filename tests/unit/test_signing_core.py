"""The pure half of signed pins (catalog/signing.py): the statement of a manifest is the one model-signing makes
of a folder holding exactly the pinned files; bundles read and write as model-signing's do;
differences are named by their first file in path order; the policy's anchors come from one place."""

from __future__ import annotations

import base64
import hashlib
import json
import pathlib
from pathlib import Path

import pytest
from google.protobuf import json_format
from model_signing import manifest as ms_manifest
from model_signing._hashing import hashing as ms_hashing
from model_signing._signing import sign_sigstore_pb
from model_signing._signing import signing as ms_signing

from catalog.schema import CatalogSettings, FileEntry
from catalog.settings import Settings
from catalog.signing import (
    PAYLOAD_TYPE,
    Bundle,
    Resource,
    SignatureFormatError,
    Statement,
    first_difference,
    pae,
    parse_bundle,
    parse_statement,
    path_order,
    policy_of,
    statement_of,
)

PATHS = ["a.txt", "a/b.bin", "B.txt", "sub/x/y.json", "a-b", "a/a", "z", "1_Pooling/config.json"]


def entries(paths: list[str]) -> list[FileEntry]:
    return [FileEntry(path=p, size=1, sha256=hashlib.sha256(p.encode()).hexdigest()) for p in paths]


def model_signing_payload(name: str, files: list[FileEntry]) -> bytes:
    """What model-signing 1.1.1 signs for a folder holding these files (its own classes, no ignore paths)."""
    serialization = ms_manifest._FileSerialization("sha256", False)
    items = [
        ms_manifest.FileManifestItem(
            path=pathlib.PurePosixPath(f.path), digest=ms_hashing.Digest("sha256", bytes.fromhex(f.sha256))
        )
        for f in files
    ]
    payload = ms_signing.Payload(ms_manifest.Manifest(name, items, serialization))
    return json_format.MessageToJson(payload.statement.pb).encode("utf-8")


def test_the_statement_is_model_signings() -> None:
    files = entries(PATHS)
    ours = statement_of("tiny", reversed(files)).payload()
    # The same document, laid out the same way; model-signing's key order inside `predicate` follows protobuf's
    # map order, which changes between its own runs: compare as JSON, with equal lists in equal order.
    theirs = model_signing_payload("tiny", files)
    assert json.loads(ours) == json.loads(theirs)
    assert ours == statement_of("tiny", files).payload()  # ours is one fixed layout
    # ... and model-signing reads it back to the same files
    expected = ms_signing.dsse_payload_to_manifest(json.loads(ours))
    assert {str(d.identifier): d.digest.digest_hex for d in expected.resource_descriptors()} == {
        f.path: f.sha256 for f in files
    }


def test_path_order_is_by_components() -> None:
    assert sorted(["a.txt", "a/b"], key=path_order) == ["a/b", "a.txt"]  # '/' sorts before '.' only as a string
    assert [r.name for r in statement_of("m", entries(PATHS)).resources] == [
        str(p) for p in sorted(pathlib.PurePosixPath(p) for p in PATHS)
    ]


def test_a_statement_round_trips_and_its_subject_digest_is_checked() -> None:
    statement = statement_of("m", entries(PATHS))
    assert parse_statement(statement.payload()) == statement
    data = json.loads(statement.payload())
    data["subject"][0]["digest"]["sha256"] = "0" * 64
    with pytest.raises(SignatureFormatError, match="subject digest"):
        parse_statement(json.dumps(data).encode())


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: d.update(predicateType="https://model_signing/Digests/v0.1"), "predicate type"),
        (lambda d: d.update(_type="x"), "in-toto"),
        (lambda d: d["predicate"]["resources"][0].update(algorithm="blake2"), "not a sha256"),
        (lambda d: d["predicate"]["resources"][0].update(digest="ABC"), "not a sha256"),
        (lambda d: d["predicate"]["resources"].append(dict(d["predicate"]["resources"][0])), "named twice"),
        (lambda d: d["subject"].append(d["subject"][0]), "exactly one subject"),
        (lambda d: d["predicate"].pop("resources"), "lacks"),
    ],
)
def test_a_malformed_statement_says_what_is_wrong(edit: object, match: str) -> None:
    data = json.loads(statement_of("m", entries(PATHS)).payload())
    edit(data)  # type: ignore[operator]
    with pytest.raises(SignatureFormatError, match=match):
        parse_statement(json.dumps(data).encode())


def test_first_difference_names_the_first_file_in_path_order() -> None:
    pinned = entries(["a/x", "b", "c"])
    signed = statement_of("m", pinned)
    assert first_difference(signed, pinned) is None
    changed = [pinned[0], FileEntry(path="b", size=1, sha256="f" * 64), FileEntry(path="c", size=1, sha256="e" * 64)]
    diff = first_difference(signed, changed)
    assert diff is not None and (diff.path, diff.file_index, diff.pinned) == ("b", 1, "f" * 64)
    assert "pinned as sha256 fff" in diff.describe()
    added = first_difference(signed, [*pinned, *entries(["a/w"])])  # pinned after signing, sorts first
    assert added is not None and (added.path, added.file_index, added.signed) == ("a/w", 3, None)
    assert "pinned but not signed" in added.describe()
    removed = first_difference(signed, pinned[1:])
    assert removed is not None and (removed.path, removed.file_index, removed.pinned) == ("a/x", None, None)
    assert "signed but not pinned" in removed.describe()


def test_bundles_read_and_write_as_model_signings(tmp_path: Path) -> None:
    payload = statement_of("m", entries(PATHS)).payload()
    for bundle in (
        Bundle(payload, PAYLOAD_TYPE, b"\x30\x06\x02\x01\x01\x02\x01\x01", key_hint="ab" * 32),
        Bundle(payload, PAYLOAD_TYPE, b"sig", certificates=(b"leaf-der", b"intermediate-der")),
    ):
        data = bundle.render()
        assert parse_bundle(data) == bundle
        (tmp_path / "model.sig").write_bytes(data)  # model-signing reads our file and writes it back unchanged
        assert sign_sigstore_pb.Signature.read(tmp_path / "model.sig").bundle.to_json().encode() == data


def test_a_keyless_sigstore_bundle_is_read_with_its_log_entries() -> None:
    payload = statement_of("m", entries(PATHS)).payload()
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731 - a one-line helper of this test
    entry = {
        "logIndex": "7",
        "logId": {"keyId": b64(b"\x01" * 32)},
        "kindVersion": {"kind": "dsse", "version": "0.0.1"},
        "integratedTime": "1700000000",
        "inclusionPromise": {"signedEntryTimestamp": b64(b"set")},
        "canonicalizedBody": b64(b'{"kind":"dsse"}'),
    }
    body = {
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"certificate": {"rawBytes": b64(b"leaf")}, "tlogEntries": [entry]},
        "dsseEnvelope": {"payload": b64(payload), "payloadType": PAYLOAD_TYPE, "signatures": [{"sig": b64(b"s")}]},
    }
    bundle = parse_bundle(json.dumps(body).encode())
    assert bundle.certificates == (b"leaf",) and bundle.transparency_log and bundle.payload == payload
    (logged,) = bundle.log_entries
    assert (logged.log_index, logged.log_id, logged.integrated_time, logged.kind, logged.promise) == (
        7,
        b"\x01" * 32,
        1700000000,
        "dsse",
        b"set",
    )
    # What the log's signed entry timestamp is made over (sigstore-python's RFC 8785 form of the same four fields)
    assert logged.set_payload() == (
        b'{"body":"eyJraW5kIjoiZHNzZSJ9","integratedTime":1700000000,"logID":"' + b"01" * 32 + b'","logIndex":7}'
    )
    del entry["logId"]
    with pytest.raises(SignatureFormatError, match="logId"):
        parse_bundle(json.dumps(body).encode())


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"not json", "not JSON"),
        (b'{"mediaType": "application/json"}', "media type"),
        (b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "verificationMaterial": {}}', "lacks"),
        (
            b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "verificationMaterial": {"publicKey": {}},'
            b' "dsseEnvelope": {"payload": "!!", "payloadType": "x", "signatures": [{"sig": "AA=="}]}}',
            "base64",
        ),
        (
            b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "verificationMaterial": {"publicKey": {}},'
            b' "dsseEnvelope": {"payload": "AA==", "payloadType": "x", "signatures": []}}',
            "no signature",
        ),
    ],
)
def test_a_malformed_bundle_says_what_is_wrong(data: bytes, match: str) -> None:
    with pytest.raises(SignatureFormatError, match=match):
        parse_bundle(data)


def test_pae_is_dsse_v1s() -> None:
    assert pae(PAYLOAD_TYPE, b"{}") == sign_sigstore_pb.pae(b"{}")


def test_anchors_given_to_the_runner_replace_catalog_yamls(tmp_path: Path) -> None:
    catalog = CatalogSettings.model_validate(
        {
            "store": "s3://b/",
            "gpu_classes": {"l4": {"memory_gib": 24}},
            "signatures": "optional",
            "trusted_keys": ["keys/a.pub"],
            "trusted_roots": ["keys/ca.pem"],
        }
    )
    plain = policy_of(catalog, tmp_path, Settings.build({}))
    assert (
        not plain.required and plain.keys == (tmp_path / "keys/a.pub",) and plain.roots == (tmp_path / "keys/ca.pem",)
    )
    runner = policy_of(
        catalog, tmp_path, Settings.build({"CATALOG_TRUSTED_KEYS": "/etc/ci.pub", "CATALOG_REQUIRE_SIGNATURE": "1"})
    )
    assert runner.required and runner.keys == (Path("/etc/ci.pub"),) and runner.roots == ()
    flagged = policy_of(catalog, tmp_path, Settings.build({}, trusted_roots=["ca.pem"], require_signature=True))
    assert flagged.required and flagged.keys == () and flagged.roots == (Path("ca.pem"),)


@pytest.mark.parametrize(
    "given",
    [
        {"CATALOG_TRUSTED_KEYS": "/etc/ci.pub"},
        {"CATALOG_TRUSTED_ROOTS": "/etc/ca.pem"},
        {"CATALOG_TRUSTED_IDENTITIES": "ci@example.org|https://issuer.example"},
        {"CATALOG_TRUSTED_LOG_KEYS": "/etc/rekor.pub"},
    ],
)
def test_anchors_given_to_the_runner_require_signatures_whatever_catalog_yaml_says(
    tmp_path: Path, given: dict[str, str]
) -> None:
    """A merged `signatures: optional` must not switch off the gate of a runner that names its own trust."""
    catalog = CatalogSettings.model_validate(
        {
            "store": "s3://b/",
            "gpu_classes": {"l4": {"memory_gib": 24}},
            "signatures": "optional",
            "trusted_keys": ["keys/a.pub"],
            "trusted_identities": [{"identity": "pr@evil", "issuer": "x"}],
            "log_entries": "accept-unchecked",
        }
    )
    runner = policy_of(catalog, tmp_path, Settings.build(given))
    assert runner.required and runner.runner
    assert all(i.identity != "pr@evil" for i in runner.identities) and not runner.unchecked_log_entries
    assert tmp_path / "keys/a.pub" not in runner.keys


def test_identities_parse_as_identity_and_issuer() -> None:
    from catalog.errors import UsageError

    built = Settings.build(
        {"CATALOG_TRUSTED_IDENTITIES": "CN=ci,O=Org|CN=Org CA\nci@example.org|https://accounts.example"}
    )
    assert built.trusted_identities == (("CN=ci,O=Org", "CN=Org CA"), ("ci@example.org", "https://accounts.example"))
    assert Settings.build({}, trusted_identities=["a|b"]).trusted_identities == (("a", "b"),)
    for bad in ("no-issuer", "|issuer", "identity|"):
        with pytest.raises(UsageError, match="IDENTITY.ISSUER"):
            Settings.build({"CATALOG_TRUSTED_IDENTITIES": bad})
    with pytest.raises(UsageError, match="CATALOG_LOG_ENTRIES"):
        Settings.build({"CATALOG_LOG_ENTRIES": "maybe"})


def test_a_typo_in_the_require_switch_is_a_usage_error() -> None:
    from catalog.errors import UsageError

    with pytest.raises(UsageError, match="CATALOG_REQUIRE_SIGNATURE"):
        Settings.build({"CATALOG_REQUIRE_SIGNATURE": "ture"})
    assert not Settings.build({"CATALOG_REQUIRE_SIGNATURE": "0"}).require_signature


def test_resource_digests_are_what_the_subject_hashes() -> None:
    statement = Statement("m", (Resource("a", "00" * 32), Resource("b", "11" * 32)))
    assert statement.digest == hashlib.sha256(bytes(32) + bytes([0x11] * 32)).hexdigest()
