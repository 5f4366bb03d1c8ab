"""oci:// against a real OCI registry (Debian's docker-registry on loopback) and the real `oras` client.

Every bundled model syncs as a ModelPack artifact and resolves cold from it; a second revision uploads only what
changed; two models sharing a file store it once; `oras pull` of a synced model gives the pinned files and an
artifact pushed by `oras` resolves when its layers are the pins; a registry serving other bytes under a digest
(its storage folder edited) is refused as the store and skipped as a mirror. HOME and DOCKER_CONFIG are temp
folders in every test: the machine's docker config is never read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import files_yaml, manifest_text, write_catalog
from oci_registry import RegistryServer

from catalog.errors import IntegrityError, MissingObjectError
from catalog.lookup import Catalog, load
from catalog.settings import Settings
from resolver.cache import Cache
from resolver.hub import HubOptions
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import LocalStore, open_catalog_store, open_store
from resolver.stores.modelpack import FILEPATH, WEIGHT
from resolver.stores.oci import LayerMismatchError, ManifestDigestError, OciStore
from resolver.sync import Action, SourceOfBytes, SyncPlan, apply, make_plan
from resolver.transfer import TransferConfig
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]
NAME = "tiny-llama"
REV1 = "1a" * 20
REV2 = "2b" * 20


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the machine's ~/.docker (oras reads $HOME's docker config too)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    for name in ("CATALOG_OCI_USERNAME", "CATALOG_OCI_PASSWORD", "CATALOG_OCI_REGISTRY", "CATALOG_OCI_PLAIN_HTTP"):
        monkeypatch.delenv(name, raising=False)


def settings(tmp_path: Path, store: str, **env: str) -> Settings:
    return Settings.build({"DOCKER_CONFIG": str(tmp_path / "docker"), **env}, store=store, cache_dir=tmp_path / "cache")


def oci_url(registry: RegistryServer) -> str:
    return f"oci://{registry.host}/t{uuid.uuid4().hex[:10]}/"


def open_oci(cat: Catalog, tmp_path: Path, url: str, **env: str) -> OciStore:
    store = open_catalog_store(cat, settings(tmp_path, url, **env))
    assert isinstance(store, OciStore)
    return store


def sync(cat: Catalog, store: OciStore, folder: Path, tmp_path: Path, *names: str, prune: bool = False) -> SyncPlan:
    """Plan and apply, uploading from `folder` (<folder>/<name>/ per model when present); raises on any error."""
    config = TransferConfig()
    plan = make_plan(cat, names, store, prune=prune, delete_orphans=False, deep=False, config=config)
    source = SourceOfBytes(cat, Cache(tmp_path / "sync-cache"), HubOptions(), folder, config)
    report = apply(plan, cat, store, source, max_delete=10, check_fresh=False, config=config)
    assert report.errors == [], report.errors
    return plan


def drift(cat: Catalog, store: OciStore, *names: str, prune: bool = False) -> dict[str, Action]:
    plan = make_plan(cat, names, store, prune=prune, delete_orphans=False, deep=False, config=TransferConfig())
    return {f"{i.model}/{i.path}" if i.model else i.key: i.action for i in plan.items if i.action is not Action.OK}


def same_files(cat: Catalog, name: str, folder: Path, source: Path) -> None:
    for entry in cat.get(name).files:
        data = (folder / entry.path).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry.sha256
        assert data == (source / entry.path).read_bytes()


def small_catalog(tmp_path: Path, models: dict[str, dict[str, bytes]], revision: str = REV1) -> tuple[Catalog, Path]:
    """A catalog of `models` (name -> path -> bytes), their files under <folder>/<name>/."""
    folder = tmp_path / f"files-{revision[:4]}"
    manifests = {}
    for name, files in models.items():
        for path, data in files.items():
            (folder / name / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / name / path).write_bytes(data)
        entries = [(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in sorted(files.items())]
        manifests[f"{name}.yaml"] = manifest_text(
            name, revision=revision, files=files_yaml(*entries), prefix=f"s3://ci-bucket/org/{name}/{revision}/"
        )
    return load(write_catalog(tmp_path / f"cat-{revision[:4]}", manifests)), folder


# -- the bundled catalog, through the CLI ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def synced(
    oci_registry: RegistryServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path, dict[str, str]]]:
    """Every bundled model synced once by `catalog sync --from-dir OUT --store oci://...` (OUT written by
    `python -m resolver.examples OUT`, plus the real MiniLM files): the store URL, OUT, the CLI's environment."""
    from resolver.examples import minilm_dir

    root = tmp_path_factory.mktemp("oci-synced")
    out = root / "out"
    made = subprocess.run(
        [sys.executable, "-m", "resolver.examples", str(out)], capture_output=True, text=True, timeout=300
    )
    assert made.returncode == 0, made.stderr
    (out / "all-minilm-l6-v2").symlink_to(minilm_dir())
    (root / "home").mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "DOCKER_"))},
        "HOME": str(root / "home"),
        "DOCKER_CONFIG": str(root / "docker"),
        "CATALOG_DIR": str(ROOT / "manifests"),
        "CATALOG_CACHE": str(root / "cache"),
        "CATALOG_STORE": oci_url(oci_registry),
    }
    done = subprocess.run(
        [sys.executable, "-m", "catalog", "sync", "--from-dir", str(out), "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    env["SYNC_REPORT"] = done.stdout
    yield env["CATALOG_STORE"], out, env


def test_every_bundled_model_syncs_and_resolves_cold_from_the_registry(
    synced: tuple[str, Path, dict[str, str]], bundled: Catalog, tmp_path: Path
) -> None:
    url, out, env = synced
    report = json.loads(env["SYNC_REPORT"])
    assert report["errors"] == [] and len(report["uploaded"]) == sum(len(m.files) for m in bundled)
    assert report["requests"]["PatchBlob"] >= 2  # MiniLM's 87 MiB weights went up in chunks of the 64 MiB part size
    check = subprocess.run(
        [sys.executable, "-m", "catalog", "sync", "--check"], capture_output=True, text=True, env=env, timeout=120
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "No changes" in check.stdout
    for m in bundled:  # cold: an empty cache per model, a fresh store (no manifest read before)
        store = open_oci(bundled, tmp_path, url)
        result = resolve(bundled, m.name, cache=Cache(tmp_path / f"cache-{m.name}"), store=store)
        assert result.streamed == () and result.model == str(result.path)  # runai/tensorizer formats come back local
        assert set(result.sources.values()) == {url}
        same_files(bundled, m.name, result.path, out / m.name)
        assert (
            store.requests["GetManifest"] == 1
        )  # one manifest read, then blobs by digest (a large one in ranged parts)
        assert store.requests["GetBlob"] >= len({e.sha256 for e in m.files})


def test_oras_pull_of_a_synced_model_yields_the_pinned_files(
    synced: tuple[str, Path, dict[str, str]], bundled: Catalog, tmp_path: Path
) -> None:
    import oras.client

    url, out, _ = synced
    host, namespace = url[len("oci://") :].rstrip("/").split("/", 1)
    client = oras.client.OrasClient(hostname=host, insecure=True)
    for name in ("all-minilm-l6-v2", "tiny-sts"):  # nested paths (1_Pooling/config.json, data/train.csv)
        m = bundled.get(name)
        pulled = tmp_path / name
        client.pull(target=f"{host}/{namespace}/{name}:{m.source.revision}", outdir=str(pulled))
        got = sorted(p.relative_to(pulled).as_posix() for p in pulled.rglob("*") if p.is_file())
        assert got == sorted(e.path for e in m.files)
        same_files(bundled, name, pulled, out / name)
        manifest = client.get_manifest(f"{host}/{namespace}/{name}:latest")  # the readable tag names the same artifact
        assert [layer["annotations"][FILEPATH] for layer in manifest["layers"]] == [e.path for e in m.files]
        assert manifest["artifactType"] == "application/vnd.cncf.model.manifest.v1+json"


# -- revisions and sharing ----------------------------------------------------------------------------------------
def test_a_second_revision_uploads_only_the_changed_file_and_the_first_still_resolves(
    oci_registry: RegistryServer, tmp_path: Path
) -> None:
    files = {"config.json": b'{"a": 1}', "model.safetensors": os.urandom(300_000), "tokenizer.json": b'{"t": 2}' * 100}
    first, folder1 = small_catalog(tmp_path, {"m": files})
    url = oci_url(oci_registry)
    store = open_oci(first, tmp_path, url)
    sync(first, store, folder1, tmp_path)
    assert store.blobs == {"uploaded": 3}
    second, folder2 = small_catalog(tmp_path, {"m": {**files, "model.safetensors": os.urandom(300_000)}}, revision=REV2)
    store2 = open_oci(second, tmp_path, url)
    assert set(drift(second, store2).values()) == {Action.UPLOAD}  # nothing is tagged REV2 yet
    sync(second, store2, folder2, tmp_path)
    assert store2.blobs == {"uploaded": 1, "present": 2}  # only the changed file's bytes went up
    assert drift(second, open_oci(second, tmp_path, url)) == {}
    for cat, folder in ((first, folder1), (second, folder2)):  # both tags resolve, each to its own pins
        done = resolve(
            cat,
            "m",
            cache=Cache(tmp_path / f"c-{cat.get('m').source.revision[:4]}"),
            store=open_oci(cat, tmp_path, url),
        )
        same_files(cat, "m", done.path, folder / "m")


def test_two_models_sharing_a_file_store_it_once(oci_registry: RegistryServer, tmp_path: Path) -> None:
    shared = os.urandom(200_000)
    cat, folder = small_catalog(
        tmp_path,
        {
            "a": {"config.json": b'{"a": 1}', "model.safetensors": shared},
            "b": {"config.json": b'{"b": 2}', "model.safetensors": shared},
        },
    )
    url = oci_url(oci_registry)
    together = open_oci(cat, tmp_path, url)
    sync(cat, together, folder, tmp_path)  # both in one sync: the shared blob goes up once, then is mounted
    assert together.blobs == {"uploaded": 3, "mounted": 1}
    cat2, folder2 = small_catalog(
        tmp_path / "later",
        {
            "a": {"config.json": b'{"a": 1}', "model.safetensors": shared},
            "c": {"config.json": b'{"c": 3}', "model.safetensors": shared},
        },
    )
    later = open_oci(
        cat2, tmp_path, url
    )  # another run, another model pinning the same file: mounted from a's repository
    sync(cat2, later, folder2, tmp_path, "c")
    assert later.blobs == {"uploaded": 1, "mounted": 1}
    for name in ("a", "b"):
        done = resolve(cat, name, cache=Cache(tmp_path / f"cache-{name}"), store=open_oci(cat, tmp_path, url))
        same_files(cat, name, done.path, folder / name)


# -- artifacts pushed by oras, drift, prune ---------------------------------------------------------------------------
def oras_push(
    registry: RegistryServer, namespace: str, name: str, revision: str, files: dict[str, Path], tmp_path: Path
) -> None:
    """Push `files` (path in the model -> local file) as oras does, each layer named by ModelPack's filepath annotation."""
    import oras.client

    staging = tmp_path / f"oras-{uuid.uuid4().hex[:6]}"
    annotations: dict[str, dict[str, str]] = {}
    pushed = []
    for path, source in files.items():
        target = staging / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        annotations[str(target)] = {FILEPATH: path}
        pushed.append(f"{target}:{WEIGHT}")
    (staging / "annotations.json").write_text(json.dumps(annotations))
    oras.client.OrasClient(hostname=registry.host, insecure=True).push(
        target=f"{registry.host}/{namespace}/{name}:{revision}",
        files=pushed,
        disable_path_validation=True,
        annotation_file=str(staging / "annotations.json"),
        quiet=True,
    )


def test_an_artifact_pushed_by_oras_resolves_when_its_layers_match_the_pins(
    oci_registry: RegistryServer, bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    m = bundled.get(NAME)
    url = oci_url(oci_registry)
    namespace = url.rstrip("/").rsplit("/", 1)[1]
    oras_push(
        oci_registry, namespace, NAME, m.source.revision, {e.path: sources[NAME] / e.path for e in m.files}, tmp_path
    )
    done = resolve(bundled, NAME, cache=Cache(tmp_path / "cache1"), store=open_oci(bundled, tmp_path, url))
    same_files(bundled, NAME, done.path, sources[NAME])
    assert drift(bundled, open_oci(bundled, tmp_path, url), NAME) == {}  # its layer digests are the pins: in sync

    # Re-pushed with other bytes at one path and a file no manifest pins: refused before a byte is fetched,
    # seen as drift, repaired by sync (the stray layer dropped with --prune).
    other = tmp_path / "other-tokenizer.json"
    other.write_bytes(b'{"not": "the pinned tokenizer"}')
    stray = tmp_path / "stray.txt"
    stray.write_bytes(b"not pinned")
    oras_push(
        oci_registry,
        namespace,
        NAME,
        m.source.revision,
        {**{e.path: sources[NAME] / e.path for e in m.files}, "tokenizer.json": other, "notes/stray.txt": stray},
        tmp_path,
    )
    store = open_oci(bundled, tmp_path, url)
    with pytest.raises(LayerMismatchError) as refused:
        resolve(bundled, NAME, cache=Cache(tmp_path / "cache2"), store=store)
    assert "tokenizer.json" in str(refused.value) and "nothing was downloaded" in str(refused.value)
    assert store.requests["GetBlob"] == 0  # every open refused: not one blob was asked for
    found = drift(bundled, open_oci(bundled, tmp_path, url), NAME, prune=True)
    assert found == {f"{NAME}/tokenizer.json": Action.REPLACE, f"{NAME}/notes/stray.txt": Action.EXTRA}
    repair = open_oci(bundled, tmp_path, url)
    sync(bundled, repair, sources[NAME].parent, tmp_path, NAME, prune=True)
    assert repair.blobs == {"present": 1}  # the pinned tokenizer was in the repository already (the first push)
    assert drift(bundled, open_oci(bundled, tmp_path, url), NAME, prune=True) == {}
    done = resolve(bundled, NAME, cache=Cache(tmp_path / "cache3"), store=open_oci(bundled, tmp_path, url))
    same_files(bundled, NAME, done.path, sources[NAME])


# -- a registry that serves other bytes ------------------------------------------------------------------------------
@pytest.fixture
def own_registry(tmp_path: Path) -> Iterator[RegistryServer]:
    """A registry of the test's own: tampering with its storage must not touch other tests' blobs."""
    server = RegistryServer(tmp_path / "registry").start()
    yield server
    server.stop()


def flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_tampered_blob_is_refused_as_the_store_and_skipped_as_a_mirror(
    own_registry: RegistryServer, bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    url = oci_url(own_registry)
    sync(bundled, open_oci(bundled, tmp_path, url), sources[NAME].parent, tmp_path, NAME)
    weights = bundled.get(NAME).file("model.safetensors")
    assert weights is not None
    flip_middle_byte(own_registry.blob_file(f"sha256:{weights.sha256}"))  # same size, same digest served: other bytes

    cache = Cache(tmp_path / "cache")
    with pytest.raises(IntegrityError) as refused:
        resolve(bundled, NAME, cache=cache, store=open_oci(bundled, tmp_path, url))
    assert refused.value.path == "model.safetensors" and refused.value.what == "sha256"
    assert not cache.blob_path(weights.sha256).exists()  # nothing unverified was kept

    primary = LocalStore(tmp_path / "primary")  # the registry as a mirror in front of a good store
    upload_from_dir(bundled, NAME, sources[NAME], primary)
    mirror = open_store(url, settings(tmp_path, url))
    done = resolve(
        bundled, NAME, cache=Cache(tmp_path / "cache2"), store=primary, options=ResolveOptions(mirrors=(mirror,))
    )
    assert done.sources["model.safetensors"] == primary.url
    assert {p: s for p, s in done.sources.items() if p != "model.safetensors"} == {
        e.path: mirror.url for e in bundled.get(NAME).files if e.path != "model.safetensors"
    }
    same_files(bundled, NAME, done.path, sources[NAME])


def test_a_manifest_whose_bytes_are_not_its_digest_is_refused_and_skipped_as_a_mirror(
    own_registry: RegistryServer, bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    url = oci_url(own_registry)
    namespace = url.rstrip("/").rsplit("/", 1)[1]
    sync(bundled, open_oci(bundled, tmp_path, url), sources[NAME].parent, tmp_path, NAME)
    revision = bundled.get(NAME).source.revision
    link = (
        own_registry.storage
        / f"docker/registry/v2/repositories/{namespace}/{NAME}/_manifests/tags/{revision}/current/link"
    )
    stored = own_registry.blob_file(link.read_text().strip())
    stored.write_bytes(
        stored.read_bytes() + b"\n"
    )  # still JSON, still the same layers: but not the bytes of its digest
    with pytest.raises(ManifestDigestError):
        resolve(bundled, NAME, cache=Cache(tmp_path / "cache"), store=open_oci(bundled, tmp_path, url))
    primary = LocalStore(tmp_path / "primary")
    upload_from_dir(bundled, NAME, sources[NAME], primary)
    done = resolve(
        bundled,
        NAME,
        cache=Cache(tmp_path / "cache2"),
        store=primary,
        options=ResolveOptions(mirrors=(open_store(url, settings(tmp_path, url)),)),
    )
    assert set(done.sources.values()) == {primary.url}


def test_a_model_not_in_the_registry_is_missing_with_the_sync_hint(
    oci_registry: RegistryServer, bundled: Catalog, tmp_path: Path
) -> None:
    with pytest.raises(MissingObjectError) as missing:
        resolve(
            bundled, NAME, cache=Cache(tmp_path / "cache"), store=open_oci(bundled, tmp_path, oci_url(oci_registry))
        )
    assert "catalog sync tiny-llama" in (getattr(missing.value, "hint", "") or "")
