"""oci:// over the one HTTP transport, against Debian's docker-registry and doubles in front of it or in its place.

- A registry on object storage redirects blob HEADs and GETs to a bucket (another host): the HEAD stays a HEAD and
  reads no body, the GET's bytes verify, and the Authorization header never reaches the second host.
- Credentials never go to a plain-http token server named by an https registry; a Retry-After beyond
  CATALOG_HUB_MAX_WAIT is never waited out (both forms of the header are read).
- A registry that trickles its manifest, or its answer's headers, fails within the bounds with one line, and a
  mirror doing it is skipped for the next source.
- Hostile values (a Content-Length of `²` or 400 digits, a token's `expires_in` that is no number, manifests and
  token answers nested past the JSON parser) are one-line errors, never a traceback (exit 3).
- A model sharing files with one synced in an earlier run mounts them: none is uploaded again.

HOME and DOCKER_CONFIG are temp folders in every test: the machine's docker config is never read.
"""

from __future__ import annotations

import email.utils
import hashlib
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import files_yaml, manifest_text, write_catalog
from oci_registry import RegistryDouble, RegistryServer
from reliability.hostile_http import HostileHttp, tls_files

from catalog.errors import StoreUnavailableError
from catalog.lookup import Catalog, load
from catalog.settings import Settings
from resolver.cache import Cache
from resolver.hub import HubOptions
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import LocalStore, bind_models, open_catalog_store
from resolver.stores import oci as oci_store
from resolver.stores.oci import OciStore
from resolver.sync import SourceOfBytes, apply, make_plan
from resolver.transfer import TransferConfig
from resolver.upload import upload_from_dir
from resolver.waits import Bounds, WaitTooLongError

ROOT = Path(__file__).resolve().parents[2]
USER, PASSWORD = "ci-bot", "pw-71c2-not-for-logs"
REV = "3c" * 20


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    for name in ("CATALOG_OCI_USERNAME", "CATALOG_OCI_PASSWORD", "CATALOG_OCI_REGISTRY", "CATALOG_OCI_PLAIN_HTTP"):
        monkeypatch.delenv(name, raising=False)


def settings(tmp_path: Path, store: str, **env: str) -> Settings:
    return Settings.build({"DOCKER_CONFIG": str(tmp_path / "docker"), **env}, store=store, cache_dir=tmp_path / "cache")


def small_catalog(root: Path, models: dict[str, dict[str, bytes]]) -> tuple[Catalog, Path]:
    """A catalog of `models` (name -> path -> bytes), their files under <folder>/<name>/."""
    folder = root / "files"
    manifests = {}
    for name, files in models.items():
        for path, data in files.items():
            (folder / name / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / name / path).write_bytes(data)
        entries = [(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in sorted(files.items())]
        manifests[f"{name}.yaml"] = manifest_text(
            name, revision=REV, files=files_yaml(*entries), prefix=f"s3://ci-bucket/org/{name}/"
        )
    return load(write_catalog(root / "cat", manifests)), folder


def sync(cat: Catalog, store: OciStore, folder: Path, tmp_path: Path, *names: str) -> None:
    config = TransferConfig()
    plan = make_plan(cat, names, store, prune=False, delete_orphans=False, deep=False, config=config)
    source = SourceOfBytes(cat, Cache(tmp_path / "sync-cache"), HubOptions(), folder, config)
    report = apply(plan, cat, store, source, max_delete=10, check_fresh=False, config=config)
    assert report.errors == [], report.errors


def namespace() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


# -- redirects ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def basic_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    server = RegistryServer(tmp_path_factory.mktemp("registry-basic"), users={USER: PASSWORD}).start()
    yield server
    server.stop()


def test_redirected_blob_heads_stay_heads_and_no_authorization_reaches_the_second_host(
    basic_registry: RegistryServer, tmp_path: Path
) -> None:
    shared = os.urandom(300_000)
    cat, folder = small_catalog(
        tmp_path,
        {
            "a": {"config.json": b'{"a": 1}', "model.safetensors": shared},
            "b": {"config.json": b'{"b": 2}', "model.safetensors": shared},
        },
    )
    double = RegistryDouble(basic_registry)
    try:
        url = f"oci://{double.host}/{namespace()}/"
        env = {"CATALOG_OCI_USERNAME": USER, "CATALOG_OCI_PASSWORD": PASSWORD}
        first = open_catalog_store(cat, settings(tmp_path, url, **env))
        assert isinstance(first, OciStore)
        sync(cat, first, folder, tmp_path, "a")
        second = open_catalog_store(cat, settings(tmp_path, url, **env))  # another run: b's blobs are HEADed first
        assert isinstance(second, OciStore)
        sync(cat, second, folder, tmp_path, "b")
        heads = [r for r in double.blobs.requests if r[0] == "HEAD"]
        assert heads, "no HEAD was redirected: the test proves nothing"
        assert second.blobs["present"] + second.blobs["mounted"] >= 1 and second.blobs["uploaded"] == 1

        reader = open_catalog_store(cat, settings(tmp_path, url, **env))
        done = resolve(cat, "a", cache=Cache(tmp_path / "cold"), store=reader)
        assert (done.path / "model.safetensors").read_bytes() == shared
        gets = [r for r in double.blobs.requests if r[0] == "GET"]
        assert len(gets) >= 2 and double.blobs.sent >= len(shared)
        # A HEAD re-sent as a GET would show here as a GET before the resolve, and read the whole blob.
        assert {r[0] for r in double.blobs.requests[: len(double.blobs.requests) - len(gets)]} == {"HEAD"}
        assert any("authorization" in r[2] for r in double.requests)  # the registry itself got the credentials ...
        assert not [r for r in double.blobs.requests if "authorization" in r[2]]  # ... the second host never
    finally:
        double.close()


# -- credentials and waits ---------------------------------------------------------------------------------------
def one_model(tmp_path: Path) -> Catalog:
    return small_catalog(tmp_path, {"m": {"config.json": b"{}", "model.safetensors": b"weights"}})[0]


def test_an_https_registry_naming_a_plain_http_token_server_gets_no_credentials_sent_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    certificate, key = tls_files(tmp_path / "tls")
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate))  # the client trusts the double's certificate
    with HostileHttp(mode="script") as tokens, HostileHttp(mode="script", tls=(certificate, key)) as registry:
        tokens.script = lambda method, path, headers: (200, {"Content-Type": "application/json"}, b'{"token": "t"}')
        realm = f'Bearer realm="{tokens.url}/token",service="registry"'
        registry.script = lambda method, path, headers: (401, {"WWW-Authenticate": realm}, b"")
        cat = one_model(tmp_path)
        url = f"oci://127.0.0.1:{registry.port}/{namespace()}/?plain-http=0"
        store = open_catalog_store(
            cat, settings(tmp_path, url, CATALOG_OCI_USERNAME=USER, CATALOG_OCI_PASSWORD=PASSWORD)
        )
        assert isinstance(store, OciStore)
        with pytest.raises(StoreUnavailableError) as refused:
            store.artifact(cat.get("m"))
        assert "refusing to send credentials there" in str(refused.value) and PASSWORD not in str(refused.value)
        assert registry.requests, "the registry was never asked: the test proves nothing"
        assert not [r for r in tokens.requests if "authorization" in r[2]]


def busy_registry(value: str) -> HostileHttp:
    registry = HostileHttp(mode="script")
    registry.script = lambda method, path, headers: (429, {"Retry-After": value}, b"")
    return registry


def test_a_retry_after_beyond_the_cap_is_never_waited_out(tmp_path: Path) -> None:
    cat = one_model(tmp_path)
    slept: list[float] = []
    with busy_registry("100000") as registry:
        store = open_catalog_store(
            cat, settings(tmp_path, f"oci://127.0.0.1:{registry.port}/{namespace()}/", CATALOG_HUB_MAX_WAIT="5")
        )
        assert isinstance(store, OciStore)
        store.client._sleep = slept.append  # the clock is the one side effect replaced: no test sleeps a day
        with pytest.raises(WaitTooLongError) as refused:
            store.artifact(cat.get("m"))
    assert "asked to retry in 100000s" in str(refused.value) and "CATALOG_HUB_MAX_WAIT" in (refused.value.hint or "")
    assert len(registry.requests) == 1 and slept == []


def test_a_retry_after_date_is_waited_out_within_the_cap(tmp_path: Path) -> None:
    cat = one_model(tmp_path)
    slept: list[float] = []
    when = email.utils.formatdate(time.time() + 4, usegmt=True)
    with busy_registry(when) as registry:
        store = open_catalog_store(
            cat, settings(tmp_path, f"oci://127.0.0.1:{registry.port}/{namespace()}/", CATALOG_HUB_MAX_WAIT="30")
        )
        assert isinstance(store, OciStore)
        store.client._sleep = slept.append
        with pytest.raises(StoreUnavailableError) as busy:
            store.artifact(cat.get("m"))
    assert "429" in str(busy.value)
    assert len(slept) == len(registry.requests) - 1 >= 1
    assert all(1 <= s <= 5 for s in slept), slept  # the date's seconds (an HTTP date has whole seconds), not a backoff


# -- bounds: trickles ----------------------------------------------------------------------------------------------
def trickling_store(cat: Catalog, tmp_path: Path, registry: HostileHttp, **env: str) -> OciStore:
    url = f"oci://127.0.0.1:{registry.port}/{namespace()}/"
    store = oci_store.from_url(
        url, settings(tmp_path, url, **env), bounds=Bounds(answer=3.0, min_rate=1024, window=1.0)
    )
    bind_models(store, cat)
    return store


def manifest_of(cat: Catalog, name: str) -> bytes:
    from resolver.stores.modelpack import build_config, build_manifest

    return build_manifest(cat.get(name), build_config(cat.get(name)))


@pytest.mark.parametrize("where", ["body", "headers"])
def test_a_registry_trickling_its_manifest_fails_within_the_bounds_and_a_mirror_doing_it_is_skipped(
    where: str, bundled: Catalog, sources: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    name = "tiny-llama"
    body = manifest_of(bundled, name)
    with HostileHttp(mode="script") as registry:
        registry.script = lambda method, path, headers: (
            200,
            {"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
            body,
        )
        registry.interval = 0.5  # 2 bytes a second: a read timeout never fires
        registry.trickle_headers, registry.trickle_body = where == "headers", where == "body"
        with pytest.raises(StoreUnavailableError) as failed:
            resolve(bundled, name, cache=Cache(tmp_path / "c1"), store=trickling_store(bundled, tmp_path, registry))
        message = str(failed.value)
        assert "\n" not in message and registry.url.replace("http://", "") in message
        assert ("below 1024 bytes/s" if where == "body" else "did not answer GET within 3s") in message

        primary = LocalStore(tmp_path / "primary")
        upload_from_dir(bundled, name, sources[name], primary)
        with caplog.at_level(logging.WARNING):
            done = resolve(
                bundled,
                name,
                cache=Cache(tmp_path / "c2"),
                store=primary,
                options=ResolveOptions(mirrors=(trickling_store(bundled, tmp_path, registry),)),
            )
        assert set(done.sources.values()) == {primary.url}
        assert "trying the next store" in caplog.text


# -- mounts across runs --------------------------------------------------------------------------------------------
def test_a_model_sharing_files_with_one_synced_in_an_earlier_run_uploads_none_of_them(
    oci_registry: RegistryServer, tmp_path: Path
) -> None:
    shared, tokenizer = os.urandom(400_000), os.urandom(50_000)
    cat, folder = small_catalog(
        tmp_path,
        {
            "a": {"config.json": b'{"a": 1}', "model.safetensors": shared, "tokenizer.json": tokenizer},  # never synced
            "b": {"config.json": b'{"b": 2}', "model.safetensors": shared, "tokenizer.json": tokenizer},
            "c": {"config.json": b'{"c": 3}', "model.safetensors": shared, "tokenizer.json": tokenizer},
        },
    )
    url = f"oci://{oci_registry.host}/{namespace()}/"
    earlier = open_catalog_store(cat, settings(tmp_path, url))
    assert isinstance(earlier, OciStore)
    sync(cat, earlier, folder, tmp_path, "b")
    assert earlier.blobs == {"uploaded": 3}
    later = open_catalog_store(
        cat, settings(tmp_path, url)
    )  # another run: nothing known of b's repository but the catalog
    assert isinstance(later, OciStore)
    sync(cat, later, folder, tmp_path, "c")
    assert later.blobs == {"uploaded": 1, "mounted": 2}  # only c's own config.json went up
    assert later.requests["MountBlob"] == 2 and later.requests["PatchBlob"] == 0
    assert later.requests["PutBlob"] == 2  # c's config.json and the artifact's config: nothing of the shared files
    done = resolve(cat, "c", cache=Cache(tmp_path / "cold"), store=open_catalog_store(cat, settings(tmp_path, url)))
    assert (done.path / "model.safetensors").read_bytes() == shared


# -- hostile values: one line, never a traceback --------------------------------------------------------------------
DEEP = b"[" * 200_000 + b"]" * 200_000


def hostile_registry(bundled: Catalog, case: str) -> HostileHttp:
    """A registry (and its own token server, at /token) that serves tiny-llama's true manifest (none for a size
    case: a sync then HEADs each blob), and the hostile value of `case` where that value goes."""
    body = manifest_of(bundled, "tiny-llama")
    server = HostileHttp(mode="script")

    def answer(method: str, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if path.startswith("/token"):
            value = {
                "expires-in-superscript": '"\u00b2"',
                "expires-in-infinite": "1e400",
                "expires-in-bool": "true",
            }.get(case, "300")
            if case == "token-nested":
                return 200, {"Content-Type": "application/json"}, DEEP
            return 200, {"Content-Type": "application/json"}, b'{"token": "t", "expires_in": ' + value.encode() + b"}"
        if case.startswith(("expires-in", "token-")) and "authorization" not in headers:
            return 401, {"WWW-Authenticate": f'Bearer realm="{server.url}/token",service="r"'}, b""
        if case.startswith("retry-after"):
            return 429, {"Retry-After": "\u00b2" if case == "retry-after-superscript" else "9" * 400}, b""
        if "/manifests/" in path:
            if case.startswith("length"):
                return 404, {}, b""
            if case == "manifest-nested":
                return 200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, DEEP
            return (
                200,
                {
                    "Content-Type": "application/vnd.oci.image.manifest.v1+json",
                    "Docker-Content-Digest": "sha256:" + hashlib.sha256(body).hexdigest(),
                },
                body,
            )
        return 200, {"Content-Length": {"length-superscript": "\u00b2", "length-400-digits": "9" * 400}[case]}, b""

    server.script = answer
    return server


@pytest.mark.parametrize(
    "case",
    [
        "length-superscript",
        "length-400-digits",
        "expires-in-superscript",
        "expires-in-infinite",
        "expires-in-bool",
        "token-nested",
        "manifest-nested",
        "retry-after-superscript",
        "retry-after-400-digits",
    ],
)
def test_hostile_values_from_a_registry_are_one_line_errors_never_a_traceback(
    case: str, bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    # The plan's listing (sync --check) and the HEADs before uploads (sync) read what resolve's transfer would wrap.
    command = (
        ["sync", "tiny-llama", "--from-dir", str(sources["tiny-llama"].parent)]
        if case.startswith("length")
        else ["sync", "--check", "tiny-llama"]
    )
    with hostile_registry(bundled, case) as registry:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "DOCKER_"))},
            "HOME": str(tmp_path / "home"),
            "DOCKER_CONFIG": str(tmp_path / "docker"),
            "CATALOG_DIR": str(ROOT / "manifests"),
            "CATALOG_CACHE": str(tmp_path / "cache"),
            "CATALOG_STORE": f"oci://127.0.0.1:{registry.port}/ns/",
            "CATALOG_HUB_MAX_WAIT": "1",
        }
        done = subprocess.run(
            [sys.executable, "-m", "catalog", *command], capture_output=True, text=True, env=env, timeout=120
        )
    assert done.returncode not in (0, 3), done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors and "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    assert all(f"127.0.0.1:{registry.port}" in line for line in errors), errors  # sync says one line per file
