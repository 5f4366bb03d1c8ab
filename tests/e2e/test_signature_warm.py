"""Required signatures on the warm path: a warm answer loads no signature code, no `cryptography` and no sigstore
stack, and never outlives a change to a signature or a trust anchor (named through a symlink and `..` too); a cold
resolve verifies again, whatever the cache holds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from signing_keys import key_pair, pki

from catalog.lookup import Catalog
from resolver.stores import open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]
WATCHED = (
    "pydantic",
    "click",
    "yaml",
    "boto3",
    "cryptography",
    "OpenSSL",
    "sigstore",
    "model_signing",
    "resolver.signatures",
    "resolver.ecdsa",
)
PROBE = (
    "import sys, json, runpy\n"
    "sys.argv = ['catalog'] + sys.argv[1:]\n"
    "try:\n    runpy.run_module('catalog', run_name='__main__')\n    code = 0\nexcept SystemExit as e:\n    code = e.code or 0\n"
    f"loaded = [m for m in {WATCHED!r} if m in sys.modules]\n"
    "print(json.dumps({'code': code, 'loaded': loaded}), file=sys.stderr)\n"
)


@pytest.fixture
def env(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> dict[str, str]:
    upload_from_dir(bundled, "tiny-llama", sources["tiny-llama"], open_store(str(tmp_path / "store")))
    catalog = tmp_path / "manifests"
    shutil.copytree(ROOT / "manifests", catalog)
    for stray in catalog.glob("*.sig"):
        stray.unlink()
    key_pair(tmp_path / "keys")
    with open(catalog / "catalog.yaml", "a") as f:
        f.write("signatures: required\ntrusted_keys: [../keys/signer.pub]\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    env = {
        **base,
        "HOME": str(tmp_path / "home"),
        "CATALOG_DIR": str(catalog),
        "CATALOG_STORE": str(tmp_path / "store"),
        "CATALOG_CACHE": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "catalog", "sign", "tiny-llama", "--private-key", str(tmp_path / "keys" / "signer.key")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return env


def probe(env: dict[str, str], *args: str) -> tuple[str, str, dict[str, object]]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env)
    lines = done.stderr.strip().splitlines()
    return done.stdout, "\n".join(lines[:-1]), json.loads(lines[-1])


def test_a_warm_answer_loads_no_signature_code_and_misses_when_a_signature_changes(
    env: dict[str, str], tmp_path: Path
) -> None:
    cold_out, _, cold = probe(env, "resolve", "tiny-llama")
    assert cold["code"] == 0 and "resolver.signatures" in cold["loaded"]  # the full CLI verified it
    warm_out, _, warm = probe(env, "resolve", "tiny-llama")
    assert warm == {"code": 0, "loaded": []} and warm_out == cold_out
    sig = Path(env["CATALOG_DIR"]) / "tiny-llama.sig"
    good = sig.read_bytes()
    # Signed by a key nobody trusts: the warm answer no longer holds, the full CLI refuses.
    other = key_pair(tmp_path / "other", "other")
    subprocess.run(
        [sys.executable, "-m", "catalog", "sign", "tiny-llama", "--private-key", str(other.private)],
        capture_output=True,
        env=env,
        check=True,
    )
    _, err, refused = probe(env, "resolve", "tiny-llama")
    assert refused["code"] == 1 and "pydantic" in refused["loaded"] and "is not trusted" in err
    sig.write_bytes(good)
    assert probe(env, "resolve", "tiny-llama")[2] == {"code": 0, "loaded": []}  # the verified bytes again
    # The trusted key file replaced by another key: the same signature is no longer trusted.
    trusted = tmp_path / "keys" / "signer.pub"
    kept = trusted.read_bytes()
    trusted.write_bytes(other.public.read_bytes())
    _, err, refused = probe(env, "resolve", "tiny-llama")
    assert refused["code"] == 1 and "is not trusted" in err
    trusted.write_bytes(kept)
    sig.unlink()
    _, err, refused = probe(env, "resolve", "tiny-llama")
    assert refused["code"] == 1 and "no signature" in err


def test_the_runners_flags_and_variables_are_answered_warm(env: dict[str, str], tmp_path: Path) -> None:
    relaxed = {**env, "CATALOG_DIR": str(tmp_path / "relaxed")}
    shutil.copytree(env["CATALOG_DIR"], relaxed["CATALOG_DIR"])
    settings = Path(relaxed["CATALOG_DIR"]) / "catalog.yaml"
    settings.write_text(settings.read_text().replace("signatures: required\ntrusted_keys: [../keys/signer.pub]\n", ""))
    key = str(tmp_path / "keys" / "signer.pub")
    args = ("resolve", "tiny-llama", "--require-signature", "--trusted-key", key)
    assert probe(relaxed, *args)[2]["code"] == 0
    assert probe(relaxed, *args)[2] == {"code": 0, "loaded": []}
    variables = {**relaxed, "CATALOG_REQUIRE_SIGNATURE": "1", "CATALOG_TRUSTED_KEYS": key}
    assert probe(variables, "resolve", "tiny-llama")[2]["code"] == 0
    assert probe(variables, "resolve", "tiny-llama")[2] == {"code": 0, "loaded": []}
    (Path(relaxed["CATALOG_DIR"]) / "tiny-llama.sig").unlink()
    _, err, refused = probe(variables, "resolve", "tiny-llama")
    assert refused["code"] == 1 and "no signature" in err
    assert probe(relaxed, "resolve", "tiny-llama")[2]["code"] == 0  # not required there: the unsigned model resolves


def test_every_cold_resolve_verifies_a_certificate_chain_again(env: dict[str, str], tmp_path: Path) -> None:
    org = pki(tmp_path / "pki", "org")
    settings = Path(env["CATALOG_DIR"]) / "catalog.yaml"
    settings.write_text(
        settings.read_text().replace(
            "trusted_keys: [../keys/signer.pub]",
            "trusted_roots: [../pki/org-root.pem]\n"
            "trusted_identities: [{identity: CN=org signer, issuer: CN=org intermediate}]",
        )
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "catalog",
            "sign",
            "tiny-llama",
            "--private-key",
            str(org.key),
            "--certificate",
            str(org.chain),
        ],
        capture_output=True,
        env=env,
        check=True,
    )
    first = probe(env, "resolve", "tiny-llama")[2]
    assert first["code"] == 0 and "cryptography" in first["loaded"]  # a certificate chain needs it
    assert probe(env, "resolve", "tiny-llama")[2] == {"code": 0, "loaded": []}  # warm: nothing loads
    cache = Path(env["CATALOG_CACHE"])
    shutil.rmtree(cache / "warm-index")  # a cold resolve: the full CLI, which keeps no verdict on disk
    again = probe(env, "resolve", "tiny-llama")[2]
    assert again["code"] == 0 and "cryptography" in again["loaded"]  # type: ignore[operator]
    assert not (cache / "signature-checks").exists()


def test_a_key_named_through_a_symlink_and_dotdot_is_watched_where_it_is_read(
    env: dict[str, str], tmp_path: Path
) -> None:
    """`--trusted-key LINK/../ci.pub` reads LINK's target's sibling; the warm answer must watch that file, not the
    `ci.pub` beside LINK that a lexical normalization names: after the real key rotates, the warm answer misses."""
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    shutil.copy(tmp_path / "keys" / "signer.pub", real / "ci.pub")
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to(real / "sub")
    shutil.copy(tmp_path / "keys" / "signer.pub", work / "ci.pub")  # the decoy a lexical `..` lands on
    run_env = {**env, "PWD": str(work)}
    args = ("resolve", "tiny-llama", "--trusted-key", "link/../ci.pub")

    def probe_in_work() -> tuple[str, dict[str, object]]:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=run_env, cwd=work
        )
        lines = done.stderr.strip().splitlines()
        return "\n".join(lines[:-1]), json.loads(lines[-1])

    assert probe_in_work()[1]["code"] == 0
    assert probe_in_work()[1] == {"code": 0, "loaded": []}  # answered warm
    other = key_pair(tmp_path / "other", "other")
    (real / "ci.pub").write_bytes(other.public.read_bytes())  # the key the runner trusts rotates
    err, refused = probe_in_work()
    assert refused["code"] == 1 and "is not trusted" in err
