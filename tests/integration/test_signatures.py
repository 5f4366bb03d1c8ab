"""Signed pins through the CLI: `catalog sign`, the `signature` rule of `validate`, the resolve gate (refusing before
any download), certificate chains to a configured root with identities and log entries, the runner's own anchors,
`verify --signatures`, and that no verdict is taken from the cache. Real files in a temp catalog (a copy of
manifests/), a folder store, real keys."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from signing_keys import KeyPair, key_pair, pki

from catalog.lookup import Catalog
from catalog_app.main import run
from resolver.stores import open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("tiny-llama", "tiny-qwen2")  # local weights, streamed weights


@dataclass
class Setup:
    catalog: Path
    store: Path
    cache: Path
    key: KeyPair
    tmp: Path

    def manifest(self, name: str) -> Path:
        return self.catalog / f"{name}.yaml"

    def sig(self, name: str) -> Path:
        return self.catalog / f"{name}.sig"

    def policy(self, text: str) -> None:
        """Replace the signature part of catalog.yaml."""
        settings = self.catalog / "catalog.yaml"
        base = settings.read_text().split("# signatures\n")[0]
        settings.write_text(base + "# signatures\n" + text)


@pytest.fixture
def setup(bundled: Catalog, sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Setup:
    catalog = tmp_path / "manifests"
    shutil.copytree(ROOT / "manifests", catalog)
    for stray in catalog.glob("*.sig"):  # the bundled models may be signed by the time this runs: start unsigned
        stray.unlink()
    store = tmp_path / "store"
    for name in MODELS:
        upload_from_dir(bundled, name, sources[name], open_store(str(store)))
    for name in ("CATALOG_REQUIRE_SIGNATURE", "CATALOG_TRUSTED_KEYS", "CATALOG_TRUSTED_ROOTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CATALOG_DIR", str(catalog))
    monkeypatch.setenv("CATALOG_STORE", str(store))
    monkeypatch.setenv("CATALOG_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    setup = Setup(catalog, store, tmp_path / "cache", key_pair(tmp_path / "keys"), tmp_path)
    setup.policy("signatures: required\ntrusted_keys: [../keys/signer.pub]\n")
    assert run(["sign", "--all", "--private-key", str(setup.key.private)]) == 0
    return setup


def catalog(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def line_of(path: Path, text: str) -> int:
    return next(
        i for i, line in enumerate(path.read_text().splitlines(), 1) if line.lstrip(" -").startswith(text)
    )  # "files:" is not "profiles:"


def nothing_fetched(cache: Path) -> bool:
    return (
        not any((cache / "blobs").rglob("*"))
        and not any((cache / "tmp").rglob("*"))
        and not (cache / "models").exists()
    )


def test_signed_models_validate_and_resolve(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    assert sorted(p.name for p in setup.catalog.glob("*.sig")) == sorted(
        f"{p.stem}.sig" for p in setup.catalog.glob("*.yaml") if p.name != "catalog.yaml"
    )
    code, out, err = catalog(capsys, "validate")
    assert code == 0, out + err
    for name in MODELS:
        code, out, err = catalog(capsys, "resolve", name)
        assert code == 0, err
    # what `sign` wrote is the model-signing statement of exactly the pins
    bundle = json.loads(setup.sig("tiny-llama").read_bytes())
    assert bundle["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    assert bundle["verificationMaterial"]["publicKey"]["hint"]


def test_a_pin_edited_after_signing_fails_validate_and_resolve_before_any_download(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = setup.manifest("tiny-llama")
    text = manifest.read_text()
    old = re.search(r"path: generation_config.json\n\s+size: \d+\n\s+sha256: ([0-9a-f]{64})", text)
    assert old is not None
    manifest.write_text(text.replace(old.group(1), "ab" * 32))
    where = f"tiny-llama.yaml:{line_of(manifest, 'path: generation_config.json')}"
    code, out, _ = catalog(capsys, "validate")
    assert code == 1
    assert (
        f"{where}: files[" in out
        and "'generation_config.json' is pinned as sha256 abab" in out
        and "[signature]" in out
    )
    code, _, err = catalog(capsys, "resolve", "tiny-llama")
    assert code == 1 and where in err and "refused before any download" in err and "Traceback" not in err
    assert nothing_fetched(setup.cache)


def test_an_unsigned_model_is_refused_the_same_way(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    setup.sig("tiny-qwen2").unlink()
    code, out, _ = catalog(capsys, "validate")
    assert code == 1 and "tiny-qwen2.yaml:" in out and "no signature: manifests/tiny-qwen2.sig does not exist" in out
    assert "catalog sign tiny-qwen2 --private-key KEY" in out
    code, _, err = catalog(capsys, "resolve", "tiny-llama", "tiny-qwen2", "--format", "json")
    assert code == 1 and "tiny-qwen2" in err and "hint: review its pins" in err
    assert nothing_fetched(setup.cache)  # not even tiny-llama, named first: every model is checked before any fetch


def test_a_pin_added_or_removed_after_signing_is_named(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = setup.manifest("tiny-llama")
    original = manifest.read_text()
    manifest.write_text(original + "  - path: added.json\n    size: 2\n    sha256: " + "cd" * 32 + "\n")
    code, out, _ = catalog(capsys, "validate", str(manifest))
    assert code == 1 and f"tiny-llama.yaml:{line_of(manifest, 'path: added.json')}" in out
    assert "'added.json' is pinned but not signed" in out
    kept = re.sub(r"  - path: generation_config.json\n    size: \d+\n    sha256: [0-9a-f]{64}\n", "", original)
    assert kept != original
    manifest.write_text(kept)
    code, out, _ = catalog(capsys, "validate", str(manifest))
    assert code == 1 and f"tiny-llama.yaml:{line_of(manifest, 'files:')}: files:" in out
    assert "'generation_config.json' is signed but not pinned" in out


def test_a_signature_by_an_untrusted_key_is_refused_unless_the_runner_trusts_it(
    setup: Setup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    other = key_pair(setup.tmp / "other", "other", curve="P-384")
    code, _, err = catalog(capsys, "sign", "tiny-llama", "--private-key", str(other.private))
    assert code == 0 and "warning: tiny-llama" in err and "not trusted" in err  # said at once, still written
    code, out, _ = catalog(capsys, "validate")
    assert code == 1 and "tiny-llama.sig is not trusted: it was signed with the key sha256:" in out
    code, _, err = catalog(capsys, "resolve", "tiny-llama")
    assert code == 1 and "not trusted" in err and "--trusted-key" in err
    # A runner's own anchors replace catalog.yaml's: the other key alone is trusted now ...
    code, _, err = catalog(capsys, "resolve", "tiny-llama", "--trusted-key", str(other.public))
    assert code == 0, err
    # ... and the catalog's key no longer is.
    code, _, err = catalog(capsys, "resolve", "tiny-qwen2", "--trusted-key", str(other.public))
    assert code == 1 and "tiny-qwen2.sig is not trusted" in err
    monkeypatch.setenv("CATALOG_TRUSTED_KEYS", f"{setup.key.public}:{other.public}")
    assert catalog(capsys, "validate")[0] == 0


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda data: b"{not json", "is not a model-signing v1.0 signature: not JSON"),
        (
            lambda data: data.replace(b'"payloadType":"application/vnd.in-toto+json"', b'"payloadType":"text/plain"'),
            "its payload type is 'text/plain'",
        ),
        (lambda data: _swap_payload(data), "does not verify with the trusted key"),
    ],
)
def test_an_unparseable_or_altered_signature_is_refused(
    setup: Setup, capsys: pytest.CaptureFixture[str], damage: object, message: str
) -> None:
    sig = setup.sig("tiny-llama")
    sig.write_bytes(damage(sig.read_bytes()))  # type: ignore[operator]
    code, out, _ = catalog(capsys, "validate")
    assert code == 1 and message in out
    code, _, err = catalog(capsys, "resolve", "tiny-llama")
    assert code == 1 and message in err and nothing_fetched(setup.cache)


def _swap_payload(data: bytes) -> bytes:
    """The signature of one statement over another: a different (well-formed) payload, the old signature."""
    import base64

    bundle = json.loads(data)
    payload = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    payload["subject"][0]["name"] = "renamed"
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    return json.dumps(bundle).encode()


def test_optional_checks_what_is_there_and_the_flag_requires_it(
    setup: Setup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    setup.policy("signatures: optional\ntrusted_keys: [../keys/signer.pub]\n")
    setup.sig("tiny-llama").unlink()
    assert catalog(capsys, "validate")[0] == 0  # optional: a model may be unsigned ...
    setup.sig("tiny-qwen2").write_text("{}")
    code, out, _ = catalog(capsys, "validate")
    assert code == 1 and "tiny-qwen2.sig is not a model-signing" in out  # ... but a signature present must hold
    setup.sig("tiny-qwen2").unlink()
    assert catalog(capsys, "resolve", "tiny-llama")[0] == 0
    code, _, err = catalog(capsys, "resolve", "tiny-qwen2", "--require-signature")
    assert code == 1 and "no signature" in err
    monkeypatch.setenv("CATALOG_REQUIRE_SIGNATURE", "1")
    code, _, err = catalog(capsys, "resolve", "tiny-qwen2")
    assert code == 1 and "no signature" in err


def test_required_without_anchors_is_a_catalog_problem(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    setup.policy("signatures: required\n")
    code, out, _ = catalog(capsys, "validate")
    settings = setup.catalog / "catalog.yaml"
    assert code == 1 and f"catalog.yaml:{line_of(settings, 'signatures: required')}: signatures:" in out
    code, _, err = catalog(capsys, "resolve", "tiny-llama")
    assert code == 1 and "invalid catalog" in err and "nothing could verify them" in err
    setup.policy("signatures: required\ntrusted_keys: [../keys/missing.pub]\n")
    code, out, _ = catalog(capsys, "validate")
    assert code == 1 and "missing.pub" in out and "No such file" in out
    code, _, err = catalog(capsys, "resolve", "tiny-llama")
    assert code == 2 and "missing.pub" in err


ORG_TRUST = (
    "signatures: required\ntrusted_roots: [../pki/org-root.pem]\n"
    "trusted_identities: [{identity: CN=org signer, issuer: CN=org intermediate}]\n"
)


def test_certificate_signatures_chain_to_a_configured_root(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    org = pki(setup.tmp / "pki", "org")
    setup.policy(ORG_TRUST)
    code, _, err = catalog(capsys, "sign", "--all", "--private-key", str(org.key), "--certificate", str(org.chain))
    assert code == 0 and "warning" not in err, err
    assert catalog(capsys, "validate")[0] == 0
    assert catalog(capsys, "resolve", "tiny-llama")[0] == 0
    bundle = json.loads(setup.sig("tiny-llama").read_bytes())
    assert len(bundle["verificationMaterial"]["x509CertificateChain"]["certificates"]) == 2
    # Another organisation's root does not vouch for it.
    pki(setup.tmp / "pki2", "other")
    code, _, err = catalog(
        capsys,
        "resolve",
        "tiny-qwen2",
        "--trusted-root",
        str(setup.tmp / "pki2" / "other-root.pem"),
        "--trusted-identity",
        "CN=org signer|CN=org intermediate",
    )
    assert code == 1 and "does not chain to a trusted root" in err
    # The chain alone is not enough: a root vouches for everyone it issues to.
    setup.policy("signatures: required\ntrusted_roots: [../pki/org-root.pem]\n")
    code, out, _ = catalog(capsys, "validate", str(setup.manifest("tiny-llama")))
    assert code == 1 and "no identity is configured" in out and "trusted_identities" in out
    for identity in ("CN=someone else|CN=org intermediate", "CN=org signer|CN=another issuer"):
        code, _, err = catalog(
            capsys, "resolve", "tiny-llama", "--trusted-root", str(org.root), "--trusted-identity", identity
        )
        assert code == 1 and (
            "none of them a trusted identity" in err if "someone" in identity else "not a trusted issuer" in err
        ), err


D = dt.timedelta(days=1)


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("not-for-signing", "is not for signing"),
        ("key-usage-without-digital-signature", "key usage lacks digitalSignature"),
        ("issued-by-a-leaf", "does not chain to a trusted root"),
        # The issuer expired 1,000 days ago; the leaf, dated back into its life, was valid then and is now.
        ("expired-intermediate", "is not valid now"),
        ("expired-leaf", "no transparency-log entry proves when it signed"),
    ],
)
def test_a_certificate_a_verifier_must_refuse(
    setup: Setup, capsys: pytest.CaptureFixture[str], kind: str, message: str
) -> None:
    org = pki(
        setup.tmp / "pki",
        "org",
        code_signing=kind != "not-for-signing",
        digital_signature=kind != "key-usage-without-digital-signature",
        leaf_issuer="leaf" if kind == "issued-by-a-leaf" else "intermediate",
        intermediate_valid=(-3000 * D, -1000 * D) if kind == "expired-intermediate" else (-3000 * D, 3000 * D),
        leaf_valid=(
            (-1500 * D, 3000 * D)
            if kind == "expired-intermediate"
            else (-2 * D, -D)
            if kind == "expired-leaf"
            else (-D, D)
        ),
    )
    setup.policy(ORG_TRUST)
    assert catalog(capsys, "sign", "tiny-llama", "--private-key", str(org.key), "--certificate", str(org.chain))[0] == 0
    code, out, _ = catalog(capsys, "validate", str(setup.manifest("tiny-llama")))
    assert code == 1 and message in out, out


def test_sign_refuses_a_certificate_of_another_key_and_a_non_ec_key(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    org = pki(setup.tmp / "pki", "org")
    code, _, err = catalog(
        capsys, "sign", "tiny-llama", "--private-key", str(setup.key.private), "--certificate", str(org.chain)
    )
    assert code == 2 and "is not for the key" in err
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    rsa_key = setup.tmp / "rsa.key"
    rsa_key.write_bytes(
        rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    code, _, err = catalog(capsys, "sign", "tiny-llama", "--private-key", str(rsa_key))
    assert code == 2 and "not an EC key" in err and "Traceback" not in err


def test_verify_signatures_checks_the_views(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    for name in MODELS:
        assert catalog(capsys, "resolve", name)[0] == 0
    code, out, err = catalog(capsys, "verify", "--signatures")
    assert code == 0 and "2 view(s)" in err and "against signatures" in err, out + err
    code, out, err = catalog(capsys, "verify", "--signatures", "--deep")
    assert code == 0, out + err
    # A signature swapped for another key's after the resolve: the views no longer have a trusted signature.
    other = key_pair(setup.tmp / "other", "other")
    assert catalog(capsys, "sign", "tiny-qwen2", "--private-key", str(other.private))[0] == 0
    code, out, _ = catalog(capsys, "verify", "--signatures")
    assert code == 1 and "tiny-qwen2: manifests/tiny-qwen2.sig is not trusted" in out and "tiny-llama" not in out
    # A view file changed in place: the view is not the signed bytes any more.
    view = Path(catalog(capsys, "resolve", "tiny-llama")[1].strip())
    config = view / "config.json"
    os.chmod(config, 0o644)
    config.write_text("{}")
    code, out, _ = catalog(capsys, "verify", "tiny-llama", "--signatures", "--deep")
    assert code == 1 and "tiny-llama" in out


def test_a_verdict_planted_in_the_cache_is_not_taken(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    """Whoever can write a runner's cache (a pull request's job on a persistent runner) could plant a record under the
    name earlier versions computed from public inputs (pins, signature and anchor bytes) and trusted by its presence:
    a stranger's signature is refused all the same, no verdict is written, and gc removes such records."""
    import catalog as catalog_api
    from catalog.signing import statement_of

    stranger = key_pair(setup.tmp / "stranger", "stranger")
    assert catalog(capsys, "sign", "tiny-llama", "--private-key", str(stranger.private))[0] == 0
    manifest = catalog_api.load(setup.catalog).get("tiny-llama")
    sha = lambda data: hashlib.sha256(data).hexdigest()  # noqa: E731 - a one-line helper of this test
    trusted = setup.key.public.read_bytes()
    name = sha(
        "\n".join(
            [
                "1",
                sha(statement_of(manifest.name, manifest.files).payload()),
                sha(setup.sig("tiny-llama").read_bytes()),
                sha(f"key\0{len(trusted)}\0".encode() + trusted),
            ]
        ).encode()
    )
    planted = setup.cache / "signature-checks" / name[:2] / name
    planted.parent.mkdir(parents=True)
    planted.write_text(json.dumps({"model": "tiny-llama", "verified_at": time.time()}))
    code, _, err = catalog(capsys, "resolve", "tiny-llama")
    assert code == 1 and "is not trusted" in err and nothing_fetched(setup.cache)
    assert catalog(capsys, "resolve", "tiny-qwen2")[0] == 0  # a verification that held ...
    assert [p for p in (setup.cache / "signature-checks").rglob("*") if p.is_file()] == [planted]  # ... leaves nothing
    code, out, _ = catalog(capsys, "gc")
    assert code == 0 and str(planted) in out and not planted.exists()


def test_every_key_of_a_trusted_key_file_is_trusted(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    """A key being rotated: the file holds the old key and the new one; a signature by the second verifies."""
    new = key_pair(setup.tmp / "keys", "new")
    both = setup.tmp / "keys" / "both.pub"
    both.write_bytes(setup.key.public.read_bytes() + new.public.read_bytes())
    setup.policy("signatures: required\ntrusted_keys: [../keys/both.pub]\n")
    assert catalog(capsys, "sign", "tiny-llama", "--private-key", str(new.private))[0] == 0
    code, out, err = catalog(capsys, "validate", str(setup.manifest("tiny-llama")))
    assert code == 0, out + err
    both.write_bytes(setup.key.public.read_bytes() + b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    code, out, _ = catalog(capsys, "validate")
    assert code == 1 and "key 2 of 2" in out


def test_anchors_on_the_runner_require_signatures_whatever_catalog_yaml_says(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    setup.policy("signatures: optional\n")  # a merged change to catalog.yaml
    setup.sig("tiny-llama").unlink()
    assert catalog(capsys, "resolve", "tiny-llama", "--format", "json")[0] == 0  # optional, and no runner anchors
    code, _, err = catalog(capsys, "resolve", "tiny-llama", "--trusted-key", str(setup.key.public))
    assert code == 1 and "no signature" in err and "refused before any download" in err


# Every field that changes what the engine loads is signed; description, tags and gpu are not.
EDITS = {
    "tokenizer": ("name: tiny-qwen2\n", "name: tiny-qwen2\ntokenizer: tiny-llama\n"),
    "loader": ("concurrency: 4", "concurrency: 8"),
    "allow_code": ("name: tiny-qwen2\n", "name: tiny-qwen2\nallow_code: a reason added after signing\n"),
    "load_format": ("load_format: runai_streamer\n", "load_format: safetensors\n"),
    "hf_repo": ("hf_repo: ", "hf_repo: other-"),
    "revision": ("revision: ", "revision: 0"),
}


@pytest.mark.parametrize("field", sorted(EDITS))
def test_an_edit_to_a_field_that_changes_the_load_breaks_the_signature(
    setup: Setup, capsys: pytest.CaptureFixture[str], field: str
) -> None:
    manifest = setup.manifest("tiny-qwen2")
    text = manifest.read_text()
    old, new = EDITS[field]
    assert old in text
    edited = text.replace(old, new, 1)
    if field == "revision":  # still 40 hex: drop the last digit
        edited = re.sub(r"revision: 0([0-9a-f]{39})[0-9a-f]", r"revision: 0\1", edited)
    manifest.write_text(edited)
    code, out, _ = catalog(capsys, "validate", str(manifest))
    assert (
        code == 1 and "does not cover the manifest" in out and re.search(rf"`([a-z_]+\.)?{field}(\.[a-z_]+)?` is", out)
    ), out
    key = "concurrency" if field == "loader" else field
    assert f"tiny-qwen2.yaml:{line_of(manifest, key + ':')}:" in out, out  # at the edited key's line
    code, _, err = catalog(capsys, "resolve", "tiny-qwen2")
    assert code == 1 and "refused before any download" in err and nothing_fetched(setup.cache)


def test_description_tags_and_gpu_are_not_signed(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = setup.manifest("tiny-qwen2")
    text = re.sub(r"(?m)^description: .*$", "description: edited", manifest.read_text())
    text = re.sub(r"(?m)^tags: .*$", "tags: [new]", re.sub(r"(?m)^gpu: .*$", "gpu: {class: l4, count: 1}", text))
    assert text != manifest.read_text()
    manifest.write_text(text)
    code, out, err = catalog(capsys, "validate", str(manifest))
    assert code == 0, out + err


# -- keyless (Sigstore-style) bundles: a short-lived certificate, an identity and issuer, a log entry ------------
@dataclass
class Keyless:
    bundle: dict[str, object]
    log_key: Path
    entry: dict[str, object]
    body: dict[str, object]
    log: object  # the log's private key
    time: int

    def write(self, setup: Setup, *, body: dict[str, object] | None = None, time_shift: int = 0) -> None:
        """The bundle as tiny-llama.sig, its entry signed by the log (over `body`, at the entry's time + shift)."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        entry = dict(self.entry)
        entry["canonicalizedBody"] = _b64(json.dumps(body or self.body, sort_keys=True, separators=(",", ":")).encode())
        entry["integratedTime"] = str(self.time + time_shift)
        signed = json.dumps(
            {
                "body": entry["canonicalizedBody"],
                "integratedTime": self.time + time_shift,
                "logID": base64.b64decode(self.entry["logId"]["keyId"]).hex(),  # type: ignore[index]
                "logIndex": 42,
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
        assert isinstance(self.log, ec.EllipticCurvePrivateKey)
        entry["inclusionPromise"] = {"signedEntryTimestamp": _b64(self.log.sign(signed, ec.ECDSA(hashes.SHA256())))}
        material = dict(self.bundle["verificationMaterial"])  # type: ignore[call-overload]
        material["tlogEntries"] = [entry]
        setup.sig("tiny-llama").write_text(json.dumps({**self.bundle, "verificationMaterial": material}))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
def keyless(setup: Setup) -> Keyless:
    """A Fulcio-style chain (root, intermediate) and a signing certificate for ci@example.org through
    https://issuer.example, valid for ten minutes two hours ago; a log key; tiny-llama signed then, and logged."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    import catalog as catalog_api
    from catalog.signing import PAYLOAD_TYPE, pae, signed_statement

    ago = dt.timedelta(hours=2)
    org = pki(
        setup.tmp / "pki",
        "fulcio",
        leaf_valid=(-ago, -ago + dt.timedelta(minutes=10)),
        email="ci@example.org",
        oidc_issuer="https://issuer.example",
    )
    log = ec.generate_private_key(ec.SECP256R1())
    log_key = setup.tmp / "pki" / "rekor.pub"
    log_der = log.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    log_key.write_bytes(
        log.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    payload = signed_statement(catalog_api.load(setup.catalog).get("tiny-llama")).payload()
    key = serialization.load_pem_private_key(org.key.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    leaf = x509.load_pem_x509_certificate(org.leaf.read_bytes())
    signature = key.sign(pae(PAYLOAD_TYPE, payload), ec.ECDSA(hashes.SHA256()))
    bundle = {
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"certificate": {"rawBytes": _b64(leaf.public_bytes(serialization.Encoding.DER))}},
        "dsseEnvelope": {
            "payload": _b64(payload),
            "payloadType": PAYLOAD_TYPE,
            "signatures": [{"sig": _b64(signature)}],
        },
    }
    body = {
        "apiVersion": "0.0.1",
        "kind": "dsse",
        "spec": {
            "payloadHash": {"algorithm": "sha256", "value": hashlib.sha256(payload).hexdigest()},
            "signatures": [
                {"signature": _b64(signature), "verifier": _b64(leaf.public_bytes(serialization.Encoding.PEM))}
            ],
        },
    }
    entry = {
        "logIndex": "42",
        "logId": {"keyId": _b64(hashlib.sha256(log_der).digest())},
        "kindVersion": {"kind": "dsse", "version": "0.0.1"},
    }
    made = Keyless(bundle, log_key, entry, body, log, int(time.time() - ago.total_seconds() + 60))
    made.write(setup)
    return made


KEYLESS_ROOTS = "trusted_roots: [../pki/fulcio-root.pem, ../pki/fulcio-intermediate.pem]\n"
KEYLESS_IDENTITY = "trusted_identities: [{identity: ci@example.org, issuer: 'https://issuer.example'}]\n"
KEYLESS_LOG = "trusted_log_keys: [../pki/rekor.pub]\n"


def test_a_keyless_bundle_verifies_with_its_identity_issuer_and_log_entry(
    setup: Setup, keyless: Keyless, capsys: pytest.CaptureFixture[str]
) -> None:
    setup.policy("signatures: required\n" + KEYLESS_ROOTS + KEYLESS_IDENTITY + KEYLESS_LOG)
    code, out, err = catalog(capsys, "validate", str(setup.manifest("tiny-llama")))
    assert code == 0, out + err
    assert catalog(capsys, "resolve", "tiny-llama")[0] == 0
    # The same through the runner's own settings (flags and variables) rather than catalog.yaml.
    setup.policy("signatures: optional\n")
    pki_dir = setup.tmp / "pki"
    code, _, err = catalog(
        capsys,
        "resolve",
        "tiny-llama",
        "--trusted-root",
        str(pki_dir / "fulcio-root.pem"),
        "--trusted-root",
        str(pki_dir / "fulcio-intermediate.pem"),
        "--trusted-log-key",
        str(keyless.log_key),
        "--trusted-identity",
        "ci@example.org|https://issuer.example",
    )
    assert code == 0, err


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (KEYLESS_ROOTS + KEYLESS_LOG, "no identity is configured"),
        (
            KEYLESS_ROOTS
            + KEYLESS_LOG
            + "trusted_identities: [{identity: someone@example.org, issuer: 'https://issuer.example'}]\n",
            "names ci@example.org (issuer https://issuer.example), none of them a trusted identity",
        ),
        (
            KEYLESS_ROOTS
            + KEYLESS_LOG
            + "trusted_identities: [{identity: ci@example.org, issuer: 'https://other.example'}]\n",
            "was issued through https://issuer.example, not a trusted issuer",
        ),
        (KEYLESS_ROOTS + KEYLESS_IDENTITY, "log entries are not checkable here"),
        # Accepting log entries unchecked proves no signing time: the ten-minute certificate is checked now, and fails.
        (
            KEYLESS_ROOTS + KEYLESS_IDENTITY + "log_entries: accept-unchecked\n",
            "no transparency-log entry proves when it signed",
        ),
        (
            "trusted_roots: [../pki/fulcio-root.pem]\n" + KEYLESS_IDENTITY + KEYLESS_LOG,
            "does not chain to a trusted root",
        ),
    ],
)
def test_a_keyless_bundle_is_refused_unless_everything_it_needs_is_configured(
    setup: Setup, keyless: Keyless, capsys: pytest.CaptureFixture[str], policy: str, message: str
) -> None:
    setup.policy("signatures: required\n" + policy)
    code, out, _ = catalog(capsys, "validate", str(setup.manifest("tiny-llama")))
    assert code == 1 and message in out, out


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("other-bytes", "is for other bytes"),
        ("other-signature", "records another signature or signer"),
        ("altered-entry", "does not verify with the trusted log key"),
        ("outside-the-certificate", "was not valid at"),
    ],
)
def test_a_log_entry_that_does_not_vouch_for_the_bundle_is_refused(
    setup: Setup, keyless: Keyless, capsys: pytest.CaptureFixture[str], case: str, message: str
) -> None:
    setup.policy("signatures: required\n" + KEYLESS_ROOTS + KEYLESS_IDENTITY + KEYLESS_LOG)
    spec = keyless.body["spec"]
    assert isinstance(spec, dict)
    if case == "other-bytes":  # an entry the log really made, for another payload
        keyless.write(
            setup,
            body={
                **keyless.body,
                "spec": {
                    **spec,
                    "payloadHash": {"algorithm": "sha256", "value": hashlib.sha256(b"other bytes").hexdigest()},
                },
            },
        )
    elif case == "other-signature":
        keyless.write(
            setup,
            body={
                **keyless.body,
                "spec": {**spec, "signatures": [{**spec["signatures"][0], "signature": _b64(b"another")}]},
            },
        )
    elif case == "altered-entry":  # the entry's time moved after the log signed it
        sig = json.loads(setup.sig("tiny-llama").read_text())
        sig["verificationMaterial"]["tlogEntries"][0]["integratedTime"] = str(keyless.time - 30)
        setup.sig("tiny-llama").write_text(json.dumps(sig))
    else:  # logged (and signed by the log) an hour after the certificate expired
        keyless.write(setup, time_shift=3600)
    code, out, _ = catalog(capsys, "validate", str(setup.manifest("tiny-llama")))
    assert code == 1 and message in out, out


def test_validating_key_signed_models_loads_no_crypto_library(setup: Setup) -> None:
    import subprocess
    import sys

    code = (
        "import sys, catalog_app.main\n"
        "assert catalog_app.main.run(['validate']) == 0\n"
        "print(','.join(m for m in ('cryptography', 'OpenSSL', 'sigstore', 'model_signing', 'boto3') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
    # a changed signature file alone (what pre-commit passes when only it changed) checks its model
    setup.sig("tiny-llama").write_text("{}")
    done = subprocess.run(
        [sys.executable, "-m", "catalog", "validate", str(setup.sig("tiny-llama"))],
        capture_output=True,
        text=True,
        env=dict(os.environ),
    )
    assert done.returncode == 1 and "tiny-llama.yaml:" in done.stdout and "not a model-signing" in done.stdout


def test_an_encrypted_key_without_a_terminal_is_a_usage_error(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(setup.key.private.read_bytes(), None)
    locked = setup.tmp / "locked.key"
    locked.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    code, _, err = catalog(capsys, "sign", "tiny-llama", "--private-key", str(locked))
    assert code == 2 and "is encrypted" in err and "secret" not in err


def test_a_model_serving_as_anothers_tokenizer_must_be_signed_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers import files_yaml, manifest_text, write_catalog

    import catalog as catalog_api
    from catalog.signing import SignatureError
    from resolver import signatures

    files = files_yaml(
        ("config.json", 10, "ab" * 32), ("model.safetensors", 1000, "cd" * 32), ("tokenizer.json", 5, "ef" * 32)
    )
    folder = write_catalog(
        tmp_path,
        {"main.yaml": manifest_text("main", extra="tokenizer: tok\n"), "tok.yaml": manifest_text("tok", files=files)},
    )
    key = key_pair(tmp_path / "keys")
    with open(folder / "catalog.yaml", "a") as f:
        f.write("signatures: required\ntrusted_keys: [../keys/signer.pub]\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert run(["--catalog", str(folder), "sign", "--all", "--private-key", str(key.private)]) == 0
    cat = catalog_api.load(folder)
    relied = signatures.require(cat, ["main"], cache_root=None, settings=None)
    assert {p.name for p in relied} == {"main.sig", "tok.sig", "signer.pub"}
    (folder / "tok.sig").unlink()
    with pytest.raises(SignatureError, match="tok: .*no signature"):
        signatures.require(cat, ["main"], cache_root=None, settings=None)


def test_the_library_resolve_the_pytest_plugin_uses_is_gated_too(setup: Setup) -> None:
    import catalog as catalog_api
    from catalog.signing import SignatureError
    from resolver.cache import Cache
    from resolver.resolve import ResolveOptions, resolve

    setup.sig("tiny-llama").unlink()
    cat = catalog_api.load(setup.catalog)
    with pytest.raises(SignatureError, match="no signature"):
        resolve(
            cat, "tiny-llama", cache=Cache(setup.cache), store=open_store(str(setup.store)), options=ResolveOptions()
        )
    assert nothing_fetched(setup.cache)
    assert resolve(cat, "tiny-qwen2", cache=Cache(setup.cache), store=open_store(str(setup.store))).name == "tiny-qwen2"
