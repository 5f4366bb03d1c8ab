"""Signed pins through the CLI: `catalog sign`, the `signature` rule of `validate`, the resolve gate (refusing before
any download), certificate chains to a configured root, the runner's own anchors, `verify --signatures`, and the
record of verifications that held. Real files in a temp catalog (a copy of manifests/), a folder store, real keys."""

from __future__ import annotations

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
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def nothing_fetched(cache: Path) -> bool:
    return not any((cache / "blobs").rglob("*")) and not any((cache / "tmp").rglob("*")) and not (cache / "models").exists()


def test_signed_models_validate_and_resolve(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    assert sorted(p.name for p in setup.catalog.glob("*.sig")) == sorted(f"{p.stem}.sig" for p in setup.catalog.glob("*.yaml")
                                                                          if p.name != "catalog.yaml")
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
        setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = setup.manifest("tiny-llama")
    text = manifest.read_text()
    old = re.search(r"path: generation_config.json\n\s+size: \d+\n\s+sha256: ([0-9a-f]{64})", text)
    assert old is not None
    manifest.write_text(text.replace(old.group(1), "ab" * 32))
    where = f"tiny-llama.yaml:{line_of(manifest, 'path: generation_config.json')}"
    code, out, _ = catalog(capsys, "validate")
    assert code == 1
    assert f"{where}: files[" in out and "'generation_config.json' is pinned as sha256 abab" in out and "[signature]" in out
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
        setup: Setup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
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


@pytest.mark.parametrize(("damage", "message"), [
    (lambda data: b"{not json", "is not a model-signing v1.0 signature: not JSON"),
    (lambda data: data.replace(b'"payloadType":"application/vnd.in-toto+json"', b'"payloadType":"text/plain"'),
     "its payload type is 'text/plain'"),
    (lambda data: _swap_payload(data), "does not verify with the trusted key"),
])
def test_an_unparseable_or_altered_signature_is_refused(setup: Setup, capsys: pytest.CaptureFixture[str],
                                                        damage: object, message: str) -> None:
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


def test_optional_checks_what_is_there_and_the_flag_requires_it(setup: Setup, capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
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


def test_certificate_signatures_chain_to_a_configured_root(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    org = pki(setup.tmp / "pki", "org")
    setup.policy("signatures: required\ntrusted_roots: [../pki/org-root.pem]\n")
    code, _, err = catalog(capsys, "sign", "--all", "--private-key", str(org.key), "--certificate", str(org.chain))
    assert code == 0 and "warning" not in err, err
    assert catalog(capsys, "validate")[0] == 0
    assert catalog(capsys, "resolve", "tiny-llama")[0] == 0
    bundle = json.loads(setup.sig("tiny-llama").read_bytes())
    assert len(bundle["verificationMaterial"]["x509CertificateChain"]["certificates"]) == 2
    # Another organisation's root does not vouch for it.
    pki(setup.tmp / "pki2", "other")
    code, _, err = catalog(capsys, "resolve", "tiny-qwen2", "--trusted-root", str(setup.tmp / "pki2" / "other-root.pem"))
    assert code == 1 and "does not chain to a trusted root" in err


@pytest.mark.parametrize(("kind", "message"), [
    ("not-for-signing", "is not for signing"),
    ("issued-by-a-leaf", "does not chain to a trusted root"),
])
def test_a_certificate_a_verifier_must_refuse(setup: Setup, capsys: pytest.CaptureFixture[str], kind: str,
                                              message: str) -> None:
    org = pki(setup.tmp / "pki", "org", code_signing=kind != "not-for-signing",
              leaf_issuer="leaf" if kind == "issued-by-a-leaf" else "intermediate")
    setup.policy("signatures: required\ntrusted_roots: [../pki/org-root.pem]\n")
    assert catalog(capsys, "sign", "tiny-llama", "--private-key", str(org.key), "--certificate", str(org.chain))[0] == 0
    code, out, _ = catalog(capsys, "validate", str(setup.manifest("tiny-llama")))
    assert code == 1 and message in out


def test_sign_refuses_a_certificate_of_another_key_and_a_non_ec_key(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    org = pki(setup.tmp / "pki", "org")
    code, _, err = catalog(capsys, "sign", "tiny-llama", "--private-key", str(setup.key.private), "--certificate", str(org.chain))
    assert code == 2 and "is not for the key" in err
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    rsa_key = setup.tmp / "rsa.key"
    rsa_key.write_bytes(rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
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


def test_a_verification_is_recorded_by_content_and_gc_bounds_the_records(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    checks = setup.cache / "signature-checks"
    assert catalog(capsys, "resolve", "tiny-llama")[0] == 0
    first = sorted(checks.rglob("*"))
    assert len([p for p in first if p.is_file()]) == 1
    assert catalog(capsys, "resolve", "tiny-llama", "--format", "json")[0] == 0
    assert sorted(checks.rglob("*")) == first  # the same bytes: the same record
    # Re-signing (ECDSA signatures differ each time) is another key: verified again, recorded again.
    assert catalog(capsys, "sign", "tiny-llama", "--private-key", str(setup.key.private))[0] == 0
    assert catalog(capsys, "resolve", "tiny-llama")[0] == 0
    records = [p for p in checks.rglob("*") if p.is_file()]
    assert len(records) == 2
    week_old = time.time() - 8 * 24 * 3600
    os.utime(records[0], (week_old, week_old))
    code, out, _ = catalog(capsys, "gc")
    assert code == 0 and str(records[0]) in out and not records[0].exists() and records[1].exists()


def test_a_keyless_style_bundle_is_trusted_through_a_configured_intermediate(setup: Setup,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Sigstore's keyless bundles carry the signing certificate alone (and log entries, not checked here): the
    intermediate that issued it must be among the trusted roots."""
    import base64

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    import catalog as catalog_api
    from catalog.signing import PAYLOAD_TYPE, pae, statement_of

    org = pki(setup.tmp / "pki", "org")
    payload = statement_of("tiny-llama", catalog_api.load(setup.catalog).get("tiny-llama").files).payload()
    key = serialization.load_pem_private_key(org.key.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    leaf = x509.load_pem_x509_certificate(org.leaf.read_bytes()).public_bytes(serialization.Encoding.DER)
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    bundle = {"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
              "verificationMaterial": {"certificate": {"rawBytes": b64(leaf)},
                                       "tlogEntries": [{"logIndex": "1", "kindVersion": {"kind": "dsse", "version": "0.0.1"}}]},
              "dsseEnvelope": {"payload": b64(payload), "payloadType": PAYLOAD_TYPE,
                               "signatures": [{"sig": b64(key.sign(pae(PAYLOAD_TYPE, payload), ec.ECDSA(hashes.SHA256())))}]}}
    setup.sig("tiny-llama").write_text(json.dumps(bundle))
    setup.policy("signatures: required\ntrusted_roots: [../pki/org-root.pem]\n")
    code, out, _ = catalog(capsys, "validate", str(setup.manifest("tiny-llama")))
    assert code == 1 and "does not chain to a trusted root" in out
    setup.policy("signatures: required\ntrusted_roots: [../pki/org-root.pem, ../pki/org-intermediate.pem]\n")
    code, out, err = catalog(capsys, "validate", str(setup.manifest("tiny-llama")))
    assert code == 0, out + err
    assert catalog(capsys, "resolve", "tiny-llama")[0] == 0


def test_validating_key_signed_models_loads_no_crypto_library(setup: Setup) -> None:
    import subprocess
    import sys

    code = ("import sys, catalog_app.main\n"
            "assert catalog_app.main.run(['validate']) == 0\n"
            "print(','.join(m for m in ('cryptography', 'OpenSSL', 'sigstore', 'model_signing', 'boto3') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
    # a changed signature file alone (what pre-commit passes when only it changed) checks its model
    setup.sig("tiny-llama").write_text("{}")
    done = subprocess.run([sys.executable, "-m", "catalog", "validate", str(setup.sig("tiny-llama"))], capture_output=True,
                          text=True, env=dict(os.environ))
    assert done.returncode == 1 and "tiny-llama.yaml:" in done.stdout and "not a model-signing" in done.stdout


def test_an_encrypted_key_without_a_terminal_is_a_usage_error(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(setup.key.private.read_bytes(), None)
    locked = setup.tmp / "locked.key"
    locked.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.BestAvailableEncryption(b"secret")))
    code, _, err = catalog(capsys, "sign", "tiny-llama", "--private-key", str(locked))
    assert code == 2 and "is encrypted" in err and "secret" not in err


def test_a_model_serving_as_anothers_tokenizer_must_be_signed_too(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from helpers import files_yaml, manifest_text, write_catalog

    import catalog as catalog_api
    from catalog.signing import SignatureError
    from resolver import signatures

    files = files_yaml(("config.json", 10, "ab" * 32), ("model.safetensors", 1000, "cd" * 32), ("tokenizer.json", 5, "ef" * 32))
    folder = write_catalog(tmp_path, {"main.yaml": manifest_text("main", extra="tokenizer: tok\n"),
                                      "tok.yaml": manifest_text("tok", files=files)})
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
        resolve(cat, "tiny-llama", cache=Cache(setup.cache), store=open_store(str(setup.store)), options=ResolveOptions())
    assert nothing_fetched(setup.cache)
    assert resolve(cat, "tiny-qwen2", cache=Cache(setup.cache), store=open_store(str(setup.store))).name == "tiny-qwen2"
