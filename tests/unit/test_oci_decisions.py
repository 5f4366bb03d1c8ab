"""The pure parts of oci://: ModelPack manifests, challenges, which credentials belong to which host, URL rules."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from helpers import files_yaml, manifest_text, write_catalog

from catalog.errors import UsageError
from catalog.lookup import load
from catalog.schema import FileEntry, ModelManifest
from catalog.settings import Settings
from resolver.stores import open_store
from resolver.stores.modelpack import (
    DOC,
    FILEPATH,
    TITLE,
    WEIGHT,
    WEIGHT_CONFIG,
    NotAModelManifest,
    build_config,
    build_manifest,
    digest_of,
    layer_problem,
    parse_manifest,
)
from resolver.stores.oci import OciStore
from resolver.stores.oci_auth import (
    CredentialProgram,
    Credentials,
    credentials_for,
    from_docker_config,
    parse_challenge,
)

SHA_A, SHA_B, SHA_C = "a" * 64, "b" * 64, "c" * 64


def model(tmp_path: Path) -> ModelManifest:
    files = files_yaml(("config.json", 10, SHA_A), ("model.safetensors", 1000, SHA_B), ("README.md", 5, SHA_C))
    return load(write_catalog(tmp_path, {"m.yaml": manifest_text("m", files=files)})).get("m")


def test_the_manifest_is_one_raw_layer_per_file_named_by_its_path_and_the_same_bytes_every_time(tmp_path: Path) -> None:
    m = model(tmp_path)
    config = build_config(m)
    body = build_manifest(m, config)
    assert body == build_manifest(model(tmp_path / "again"), build_config(model(tmp_path / "again")))  # no timestamps
    data = json.loads(body)
    assert data["artifactType"] == "application/vnd.cncf.model.manifest.v1+json"
    assert data["config"] == {
        "mediaType": "application/vnd.cncf.model.config.v1+json",
        "digest": digest_of(config),
        "size": len(config),
    }
    assert [(la["mediaType"], la["digest"], la["size"], la["annotations"][FILEPATH]) for la in data["layers"]] == [
        (WEIGHT_CONFIG, f"sha256:{SHA_A}", 10, "config.json"),
        (WEIGHT, f"sha256:{SHA_B}", 1000, "model.safetensors"),
        (DOC, f"sha256:{SHA_C}", 5, "README.md"),
    ]
    described = json.loads(config)["descriptor"]
    assert described["name"] == "m" and described["revision"] == m.source.revision
    assert described["sourceURL"] == "https://huggingface.co/org/m"
    assert {la.path: la.sha256 for la in parse_manifest(body).layers.values()} == {
        "config.json": SHA_A,
        "model.safetensors": SHA_B,
        "README.md": SHA_C,
    }


def layer(path: str | None, digest: str = f"sha256:{SHA_A}", size: int = 10, key: str = FILEPATH) -> dict[str, object]:
    return {"mediaType": WEIGHT, "digest": digest, "size": size, "annotations": {key: path} if path else {}}


def test_parsing_ignores_layers_without_a_safe_unique_path_and_reads_an_oras_title() -> None:
    body = json.dumps(
        {
            "schemaVersion": 2,
            "layers": [
                layer("ok.json"),
                layer("../escape"),
                layer("/abs"),
                layer(None),
                layer("ok.json", f"sha256:{SHA_B}"),
                layer("from-oras.txt", key=TITLE),
            ],
        }
    ).encode()
    parsed = parse_manifest(body)
    assert sorted(parsed.layers) == ["from-oras.txt", "ok.json"]
    assert parsed.layers["ok.json"].sha256 == SHA_A  # the first layer naming a path wins; the second is said
    assert len(parsed.ignored) == 4


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        json.dumps({"schemaVersion": 2, "manifests": []}).encode(),
        json.dumps({"schemaVersion": 1, "fsLayers": []}).encode(),
    ],
)
def test_what_is_not_an_image_manifest_is_refused(body: bytes) -> None:
    with pytest.raises(NotAModelManifest):
        parse_manifest(body)


def test_a_layer_is_the_pinned_file_only_by_its_sha256_digest_and_size() -> None:
    entry = FileEntry(path="w", size=10, sha256=SHA_A)
    parsed = parse_manifest(
        json.dumps(
            {
                "schemaVersion": 2,
                "layers": [
                    layer("same"),
                    layer("other", f"sha256:{SHA_B}"),
                    layer("resized", size=11),
                    layer("sha512", f"sha512:{SHA_A}"),
                ],
            }
        ).encode()
    )
    assert layer_problem(parsed.layers["same"], entry) is None
    assert "the pin is" in (layer_problem(parsed.layers["other"], entry) or "")
    assert "11 bytes" in (layer_problem(parsed.layers["resized"], entry) or "")
    assert layer_problem(parsed.layers["sha512"], entry) is not None
    assert layer_problem(None, entry) == "no layer names this path"


def test_challenges_are_parsed_with_quoted_and_bare_values() -> None:
    bearer = parse_challenge(
        'Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push"'
    )
    assert bearer is not None and bearer.scheme == "bearer" and bearer.realm == "https://auth.example/token"
    assert bearer.params["scope"] == "repository:a/b:pull,push" and bearer.params["service"] == "registry.example"
    basic = parse_challenge("Basic realm=registry")
    assert basic is not None and basic.scheme == "basic" and basic.realm == "registry"
    assert parse_challenge("") is None and parse_challenge(None) is None


def test_the_docker_config_gives_a_host_its_own_entry_only() -> None:
    config = {
        "auths": {
            "https://reg.example:5000/v1/": {"auth": base64.b64encode(b"u:p:w").decode()},
            "other.example": {"username": "x", "password": "y"},
            "tok.example": {"registrytoken": "T"},
            "https://index.docker.io/v1/": {"auth": base64.b64encode(b"hub:pw").decode()},
        },
        "credHelpers": {"ecr.example": "ecr-login"},
    }
    found = from_docker_config(config, "cfg", "reg.example:5000")
    assert isinstance(found, Credentials) and (found.username, found.password) == ("u", "p:w")
    assert from_docker_config(config, "cfg", "reg.example") is None  # another port is another registry
    other = from_docker_config(config, "cfg", "other.example")
    assert isinstance(other, Credentials) and other.username == "x"
    token = from_docker_config(config, "cfg", "tok.example")
    assert isinstance(token, Credentials) and token.registry_token == "T"
    hub = from_docker_config(config, "cfg", "registry-1.docker.io")
    assert isinstance(hub, Credentials) and hub.username == "hub"
    program = from_docker_config(config, "cfg", "ecr.example")
    assert isinstance(program, CredentialProgram) and program.name == "docker-credential-ecr-login"
    assert from_docker_config({"auths": {"bad.example": {"auth": "%%%"}}}, "cfg", "bad.example") is None
    assert "p:w" not in repr(found)


def test_the_settings_credentials_go_to_their_registry_only() -> None:
    empty: tuple[dict[str, object], str] = ({}, "cfg")
    mine = credentials_for("reg.example", username="u", password="p", for_host="reg.example", docker_config=empty)
    assert isinstance(mine, Credentials) and mine.origin.startswith("CATALOG_OCI_USERNAME")
    assert (
        credentials_for("mirror.example", username="u", password="p", for_host="reg.example", docker_config=empty)
        is None
    )
    assert credentials_for("reg.example", username="u", password="p", for_host=None, docker_config=empty) is None


def test_settings_read_the_oci_variables_and_never_show_the_password() -> None:
    env = {
        "CATALOG_OCI_USERNAME": "u",
        "CATALOG_OCI_PASSWORD": "secret-pw",
        "CATALOG_OCI_REGISTRY": "Reg.Example:5000",
        "CATALOG_OCI_PLAIN_HTTP": "a.example, b.example:80",
        "DOCKER_CONFIG": "/somewhere/docker",
    }
    built = Settings.build(env)
    assert built.oci.username == "u" and built.oci.registry == "reg.example:5000"
    assert built.oci.plain_http == ("a.example", "b.example:80") and built.oci.docker_config == Path(
        "/somewhere/docker"
    )
    assert "secret-pw" not in repr(built)


@pytest.mark.parametrize(
    ("url", "env", "scheme"),
    [
        ("oci://127.0.0.1:5000/ns/", {}, "http"),
        ("oci://localhost:5000/ns/", {}, "http"),
        ("oci://[::1]:5000/ns/", {}, "http"),
        ("oci://registry.example/ns/", {}, "https"),
        ("oci://registry.example/ns/", {"CATALOG_OCI_PLAIN_HTTP": "registry.example"}, "http"),
        ("oci://registry.example:5000/ns/?plain-http=1", {}, "http"),
        ("oci://127.0.0.1:5000/ns/?plain-http=0", {}, "https"),
    ],
)
def test_plain_http_only_for_loopback_or_when_asked(url: str, env: dict[str, str], scheme: str) -> None:
    store = open_store(url, Settings.build(env))
    assert isinstance(store, OciStore) and store.client.scheme == scheme
    assert store.url == url.split("?", 1)[0]


@pytest.mark.parametrize(
    "url",
    [
        "oci://user:hunter2@registry.example/ns/",
        "oci:///ns/",
        "oci://registry.example/Upper/",
        "oci://registry.example/ns/?insecure=1",
    ],
)
def test_bad_oci_urls_are_usage_errors_that_never_echo_credentials(url: str) -> None:
    with pytest.raises(UsageError) as refused:
        open_store(url, Settings.build({}))
    assert "hunter2" not in str(refused.value)


def test_an_unbound_store_says_how_to_open_it() -> None:
    store = open_store("oci://127.0.0.1:1/ns/", Settings.build({}))
    with pytest.raises(UsageError) as refused:
        store.head("org/m/config.json")
    assert "open_catalog_store" in (refused.value.hint or "")
