"""oci:// auth against the real registry: htpasswd (Basic) and the registry token flow (a token server that signs
JWTs the registry verifies). Credentials come from CATALOG_OCI_USERNAME/PASSWORD or a docker config.json in a temp
DOCKER_CONFIG (never the machine's); they go only to their registry and never into any output."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from oci_registry import RegistryServer, TokenServer

from catalog.errors import StoreUnavailableError
from catalog.lookup import Catalog
from catalog.settings import Settings
from resolver.cache import Cache
from resolver.resolve import resolve
from resolver.stores import open_catalog_store
from resolver.stores.oci import OciStore

ROOT = Path(__file__).resolve().parents[2]
NAME = "tiny-llama"
USER, PASSWORD = "ci-bot", "pw-4f9c1e-not-for-logs"
PUSHER, PUSH_PASSWORD = "pusher", "tok-7d2a90-not-for-logs"


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing here reads the machine's ~/.docker or writes under its HOME."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))


@pytest.fixture(scope="module")
def basic_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    server = RegistryServer(tmp_path_factory.mktemp("registry-basic"), users={USER: PASSWORD}).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RegistryServer, TokenServer]]:
    root = tmp_path_factory.mktemp("registry-token")
    tokens = TokenServer(root, {PUSHER: PUSH_PASSWORD}, anonymous_pull=True)
    server = RegistryServer(root / "registry", token_realm=tokens.realm, token_cert=tokens.cert_path).start()
    yield server, tokens
    server.stop()
    tokens.close()


def docker_config(tmp_path: Path, content: dict[str, object]) -> Path:
    folder = tmp_path / "docker"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(content))
    return folder


def cli_env(tmp_path: Path, store: str, **extra: str) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "DOCKER_"))}
    return {
        **base,
        "HOME": str(home),
        "DOCKER_CONFIG": str(tmp_path / "docker"),
        "CATALOG_DIR": str(ROOT / "manifests"),
        "CATALOG_CACHE": str(tmp_path / "cache"),
        "CATALOG_STORE": store,
        **extra,
    }


def catalog(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "catalog", *args], capture_output=True, text=True, env=env, timeout=300
    )


def no_secret(done: subprocess.CompletedProcess[str], *secrets: str) -> None:
    text = done.stdout + done.stderr
    for secret in secrets:
        assert secret not in text
        assert base64.b64encode(secret.encode()).decode()[:12] not in text


def url_of(registry: RegistryServer) -> str:
    return f"oci://{registry.host}/t{uuid.uuid4().hex[:10]}/"


def test_basic_auth_from_docker_config_syncs_and_resolves_without_showing_it(
    basic_registry: RegistryServer, sources: dict[str, Path], tmp_path: Path
) -> None:
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    docker_config(tmp_path, {"auths": {basic_registry.host: {"auth": auth}}})
    env = cli_env(tmp_path, url_of(basic_registry))
    pushed = catalog(env, "-vv", "sync", NAME, "--from-dir", str(sources[NAME].parent))
    assert pushed.returncode == 0, pushed.stderr
    got = catalog(env, "-vv", "resolve", NAME, "--format", "json", "--cache", str(tmp_path / "cold"))
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["source"] == env["CATALOG_STORE"]
    no_secret(pushed, PASSWORD, auth)
    no_secret(got, PASSWORD, auth)


def test_catalog_oci_settings_are_sent_to_the_store_registry_only(
    basic_registry: RegistryServer, bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    url = url_of(basic_registry)
    env = {"DOCKER_CONFIG": str(tmp_path / "docker"), "CATALOG_OCI_USERNAME": USER, "CATALOG_OCI_PASSWORD": PASSWORD}
    store = open_catalog_store(bundled, Settings.build(env, store=url))
    assert isinstance(store, OciStore)
    assert store.artifact(bundled.get(NAME)) is None  # reached with the credentials (an anonymous GET is a 401)
    elsewhere = open_catalog_store(
        bundled, Settings.build({**env, "CATALOG_OCI_REGISTRY": "registry.example:5000"}, store=url)
    )
    assert isinstance(elsewhere, OciStore)
    with pytest.raises(StoreUnavailableError) as refused:  # they belong to another registry: this one gets none
        elsewhere.artifact(bundled.get(NAME))
    assert "needs credentials" in str(refused.value) and PASSWORD not in str(refused.value)


def test_no_credentials_is_one_line_saying_where_to_put_them(basic_registry: RegistryServer, tmp_path: Path) -> None:
    done = catalog(cli_env(tmp_path, url_of(basic_registry)), "resolve", NAME)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "needs credentials" in errors[0] and basic_registry.host in errors[0]
    assert "CATALOG_OCI_USERNAME" in done.stderr and "config.json" in done.stderr


def test_a_wrong_password_is_refused_naming_where_it_came_from_not_what_it_is(
    basic_registry: RegistryServer, tmp_path: Path
) -> None:
    wrong = "wrong-9b1d-secret"
    done = catalog(
        cli_env(tmp_path, url_of(basic_registry), CATALOG_OCI_USERNAME=USER, CATALOG_OCI_PASSWORD=wrong),
        "resolve",
        NAME,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "refused the credentials from CATALOG_OCI_USERNAME/CATALOG_OCI_PASSWORD" in done.stderr
    no_secret(done, wrong)


def test_a_credential_program_is_named_as_not_run(basic_registry: RegistryServer, tmp_path: Path) -> None:
    docker_config(tmp_path, {"credHelpers": {basic_registry.host: "secretservice"}})
    done = catalog(cli_env(tmp_path, url_of(basic_registry)), "resolve", NAME)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "docker-credential-secretservice" in done.stderr and "CATALOG_OCI_USERNAME" in done.stderr


def test_the_token_flow_pushes_with_credentials_and_pulls_anonymously(
    token_registry: tuple[RegistryServer, TokenServer], bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    registry, tokens = token_registry
    url = url_of(registry)
    docker_config(tmp_path, {"auths": {f"http://{registry.host}": {"username": PUSHER, "password": PUSH_PASSWORD}}})
    env = cli_env(tmp_path, url)
    pushed = catalog(env, "-vv", "sync", NAME, "--from-dir", str(sources[NAME].parent))
    assert pushed.returncode == 0, pushed.stderr
    no_secret(pushed, PUSH_PASSWORD)
    repo = f"{url.rstrip('/').split('/', 3)[3]}/{NAME}"
    asked = [r for r in tokens.requests if f"repository:{repo}:pull,push" in r["scope"]]
    assert asked and all(r["authenticated"] == "True" for r in asked)
    # Reading with no credentials at all: the token server grants anonymous pulls, and the registry checks the JWT.
    anonymous = open_catalog_store(bundled, Settings.build({"DOCKER_CONFIG": str(tmp_path / "nothing")}, store=url))
    done = resolve(bundled, NAME, cache=Cache(tmp_path / "cache-anon"), store=anonymous)
    assert done.sources and set(done.sources.values()) == {url}
    assert anonymous.requests["GetToken"] == 1  # one token for the repository's pull scope, reused by every GET
    # Pushing anonymously is refused by the registry (the token grants pull only).
    bad = catalog(cli_env(tmp_path / "anon", url_of(registry)), "sync", NAME, "--from-dir", str(sources[NAME].parent))
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
