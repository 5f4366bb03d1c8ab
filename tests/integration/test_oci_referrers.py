"""Signatures as OCI referrers, against Debian's docker-registry (2.8.2: no referrers API, so the referrers tag
schema is what works there) and a double that adds the OCI 1.1 referrers API in front of it.

`catalog sign` with an oci:// store pushes the model-signing bundle as a referrer of the model's artifact; the
`oras` client finds it where `oras discover` looks on such a registry (the `sha256-<hex>` tag's index) and pulls the
bundle byte for byte; a resolve from `oci://...?require-signature=1` takes a signed artifact and refuses an unsigned
one, with one line (as the store), or skips the registry for the next source (as a mirror).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from oci_registry import RegistryDouble, RegistryServer
from signing_keys import key_pair

from catalog.lookup import load
from catalog.settings import Settings
from resolver.cache import Cache
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import LocalStore, open_catalog_store, open_store
from resolver.stores.modelpack import OCI_INDEX, SIGNATURE_TYPE, build_config, build_manifest, digest_of, fallback_tag
from resolver.stores.oci import OciStore, UnsignedArtifactError
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]
SIGNED, UNSIGNED = "tiny-llama", "tiny-qwen2"


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    for name in (
        "CATALOG_OCI_USERNAME",
        "CATALOG_OCI_PASSWORD",
        "CATALOG_OCI_REGISTRY",
        "CATALOG_OCI_PLAIN_HTTP",
        "CATALOG_TRUSTED_KEYS",
        "CATALOG_TRUSTED_ROOTS",
        "CATALOG_REQUIRE_SIGNATURE",
    ):
        monkeypatch.delenv(name, raising=False)


def catalog_copy(tmp_path: Path) -> Path:
    """The bundled manifests in a folder of the test's own (`catalog sign` writes <name>.sig beside them)."""
    folder = tmp_path / "manifests"
    shutil.copytree(ROOT / "manifests", folder)
    for old in folder.glob("*.sig"):
        old.unlink()
    return folder


def cli(tmp_path: Path, manifests: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "DOCKER_"))}
    (tmp_path / "home").mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "catalog", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **base,
            "HOME": str(tmp_path / "home"),
            "DOCKER_CONFIG": str(tmp_path / "docker"),
            "CATALOG_DIR": str(manifests),
            "CATALOG_CACHE": str(tmp_path / "cache"),
            **env,
        },
    )


def synced(tmp_path: Path, manifests: Path, host: str, sources: dict[str, Path]) -> str:
    url = f"oci://{host}/t{uuid.uuid4().hex[:10]}/"
    for name in (SIGNED, UNSIGNED):
        done = cli(tmp_path, manifests, "sync", name, "--from-dir", str(sources[name].parent), CATALOG_STORE=url)
        assert done.returncode == 0, done.stderr
    return url


def settings(tmp_path: Path, store: str, *keys: Path) -> Settings:
    return Settings.build(
        {"DOCKER_CONFIG": str(tmp_path / "docker")},
        store=store,
        cache_dir=tmp_path / "cache",
        trusted_keys=list(keys) or None,
    )


def test_sign_pushes_the_bundle_as_a_referrer_that_oras_finds_and_a_required_signature_gates_resolve(
    oci_registry: RegistryServer, sources: dict[str, Path], tmp_path: Path
) -> None:
    import oras.client

    manifests = catalog_copy(tmp_path)
    url = synced(tmp_path, manifests, oci_registry.host, sources)
    keys = key_pair(tmp_path / "keys")
    signed = cli(tmp_path, manifests, "sign", SIGNED, "--private-key", str(keys.private), CATALOG_STORE=url)
    assert signed.returncode == 0, signed.stderr
    assert f"pushed {SIGNED}'s signature to {url}" in signed.stdout

    cat = load(manifests)
    model = cat.get(SIGNED)
    subject = digest_of(build_manifest(model, build_config(model)))  # what sync pushed at the revision tag
    repo = f"{url.rstrip('/').rsplit('/', 1)[1]}/{SIGNED}"
    with pytest.raises(urllib.error.HTTPError) as lacking:  # 2.8.2 has no referrers API: the tag schema is what works
        urllib.request.urlopen(f"{oci_registry.url}/v2/{repo}/referrers/{subject}", timeout=10)
    assert lacking.value.code == 404
    client = oras.client.OrasClient(hostname=oci_registry.host, insecure=True)
    index = client.get_manifest(f"{oci_registry.host}/{repo}:{fallback_tag(subject)}", allowed_media_type=[OCI_INDEX])
    listed = [d for d in index["manifests"] if d.get("artifactType") == SIGNATURE_TYPE]
    assert len(listed) == 1
    pulled = tmp_path / "pulled"
    client.pull(target=f"{oci_registry.host}/{repo}@{listed[0]['digest']}", outdir=str(pulled))
    assert (pulled / f"{SIGNED}.sig").read_bytes() == (manifests / f"{SIGNED}.sig").read_bytes()
    referrer = client.get_manifest(f"{oci_registry.host}/{repo}@{listed[0]['digest']}")
    assert referrer["subject"]["digest"] == subject and referrer["artifactType"] == SIGNATURE_TYPE

    again = cli(tmp_path, manifests, "sign", SIGNED, "--private-key", str(keys.private), CATALOG_STORE=url)
    assert again.returncode == 0, again.stderr  # a second signature is listed beside the first (the index grows)
    index = client.get_manifest(f"{oci_registry.host}/{repo}:{fallback_tag(subject)}", allowed_media_type=[OCI_INDEX])
    assert len([d for d in index["manifests"] if d.get("artifactType") == SIGNATURE_TYPE]) == 2

    required = url + "?require-signature=1"
    done = resolve(
        cat,
        SIGNED,
        cache=Cache(tmp_path / "c1"),
        store=open_catalog_store(cat, settings(tmp_path, required, keys.public)),
    )
    assert set(done.sources.values()) == {url}
    with pytest.raises(UnsignedArtifactError) as refused:
        resolve(
            cat,
            UNSIGNED,
            cache=Cache(tmp_path / "c2"),
            store=open_catalog_store(cat, settings(tmp_path, required, keys.public)),
        )
    assert "has no signature referrer" in str(refused.value) and "it has none" in str(refused.value)
    other = key_pair(tmp_path / "other", "other")  # signed, but not by a key this runner trusts
    with pytest.raises(UnsignedArtifactError) as untrusted:
        resolve(
            cat,
            SIGNED,
            cache=Cache(tmp_path / "c3"),
            store=open_catalog_store(cat, settings(tmp_path, required, other.public)),
        )
    assert "not trusted" in str(untrusted.value)

    primary = LocalStore(tmp_path / "primary")  # as a mirror, a registry refusing an artifact is skipped
    upload_from_dir(cat, UNSIGNED, sources[UNSIGNED], primary)
    mirror = open_store(required, settings(tmp_path, required, keys.public))
    done = resolve(
        cat, UNSIGNED, cache=Cache(tmp_path / "c4"), store=primary, options=ResolveOptions(mirrors=(mirror,))
    )
    assert set(done.sources.values()) == {primary.url}

    # From the CLI: a runner key requires the .sig beside the manifest too (docs/signing.md), so UNSIGNED gets one that
    # is not pushed: the registry's gate alone refuses it.
    kept = cli(
        tmp_path, manifests, "sign", UNSIGNED, "--private-key", str(keys.private), "--no-push", CATALOG_STORE=url
    )
    assert kept.returncode == 0 and "pushed" not in kept.stdout, kept.stderr
    cold = cli(
        tmp_path,
        manifests,
        "resolve",
        UNSIGNED,
        "--store",
        required,
        "--trusted-key",
        str(keys.public),
        "--cache",
        str(tmp_path / "c5"),
    )
    errors = [line for line in cold.stderr.splitlines() if line.startswith("error:")]
    assert cold.returncode not in (0, 3) and len(errors) == 1 and "no signature referrer" in errors[0], cold.stderr
    assert "Traceback" not in cold.stderr
    no_keys = cli(tmp_path, manifests, "resolve", SIGNED, "--store", required, "--cache", str(tmp_path / "c6"))
    assert no_keys.returncode == 2 and "trusts no key" in no_keys.stderr, no_keys.stderr


def test_a_registry_with_the_referrers_api_keeps_the_list_itself(
    oci_registry: RegistryServer, sources: dict[str, Path], tmp_path: Path
) -> None:
    double = RegistryDouble(oci_registry, redirect_blobs=False, referrers_api=True)
    try:
        manifests = catalog_copy(tmp_path)
        url = synced(tmp_path, manifests, double.host, sources)
        keys = key_pair(tmp_path / "keys")
        signed = cli(tmp_path, manifests, "sign", SIGNED, "--private-key", str(keys.private), CATALOG_STORE=url)
        assert signed.returncode == 0, signed.stderr
        cat = load(manifests)
        store = open_catalog_store(cat, settings(tmp_path, url))
        assert isinstance(store, OciStore)
        found = store.referrers(cat.get(SIGNED), SIGNATURE_TYPE)
        assert [d.artifact_type for d in found] == [SIGNATURE_TYPE]
        assert store.referrer_payload(cat.get(SIGNED), found[0]) == (manifests / f"{SIGNED}.sig").read_bytes()
        tags = [r for r in double.requests if r[0] == "PUT" and "/manifests/sha256-" in r[1]]
        assert tags == []  # the registry answered OCI-Subject: no tag-schema index was pushed
        assert [r for r in double.requests if r[0] == "GET" and "/referrers/" in r[1]]  # read through the API
    finally:
        double.close()
