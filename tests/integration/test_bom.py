"""Bills of materials: `resolve --format cyclonedx` is schema-valid CycloneDX 1.6 (cyclonedx-python-lib's own JSON
validator) and lists exactly the models and files the call resolved, with their pins, purls and the signature's
verdict, byte-identical for identical inputs; `--format intoto` binds the same digests to the request; the pytest
plugin's `--catalog-bom FILE` lists exactly the models the session's tests used."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from signing_keys import key_pair

from catalog.lookup import Catalog
from resolver.stores import open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]
USED = ("tiny-llama", "tiny-qwen2", "tiny-sts")  # local weights, streamed weights, a dataset


@pytest.fixture
def env(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> dict[str, str]:
    manifests = tmp_path / "manifests"
    shutil.copytree(ROOT / "manifests", manifests)
    for stray in manifests.glob("*.sig"):
        stray.unlink()
    store = tmp_path / "store"
    for name in (*USED, "tiny-llama-sharded"):
        upload_from_dir(bundled, name, sources[name], open_store(str(store)))
    base = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    return {
        **base,
        "HOME": str(tmp_path / "home"),
        "CATALOG_DIR": str(manifests),
        "CATALOG_STORE": str(store),
        "CATALOG_CACHE": str(tmp_path / "cache"),
        "CATALOG_GPU_CLASS": "l4",
    }


def catalog(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "catalog", *args], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def valid_cyclonedx(text: str) -> dict[str, Any]:
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    data: dict[str, Any] = json.loads(text)
    assert data["specVersion"] == "1.6" and "timestamp" not in data.get("metadata", {})
    return data


def props(component: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["value"] for p in component.get("properties", ())}


def test_cyclonedx_lists_exactly_what_was_resolved_and_is_byte_identical(env: dict[str, str], bundled: Catalog) -> None:
    text = catalog(env, "resolve", *USED, "--format", "cyclonedx")
    data = valid_cyclonedx(text)
    resolved = json.loads(catalog(env, "resolve", *USED, "--format", "json"))
    by_name = {props(c)["model-catalog:name"]: c for c in data["components"]}
    assert sorted(by_name) == sorted(USED)
    for answer in resolved:
        component, manifest = by_name[answer["name"]], bundled.get(answer["name"])
        org, name = manifest.source.hf_repo.split("/")
        assert component["purl"] == f"pkg:huggingface/{org}/{name}@{manifest.source.revision}"
        assert component["type"] == ("data" if manifest.is_dataset else "machine-learning-model")
        assert component["version"] == manifest.source.revision and component["name"] == manifest.source.hf_repo
        files = {f["name"]: f["hashes"][0]["content"] for f in component["components"]}
        assert sorted(files) == sorted(answer["files"] + answer["streamed"])  # exactly the files the call resolved
        assert all(files[p] == manifest.file(p).sha256 for p in files)  # type: ignore[union-attr]
        streamed = {f["name"] for f in component["components"] if f.get("properties")}
        assert streamed == set(answer["streamed"])
        assert props(component)["model-catalog:signature"] == "not checked: signatures are not required"
    # Identical inputs, identical bytes: again (warm index or not), and from another cache.
    assert catalog(env, "resolve", *USED, "--format", "cyclonedx") == text
    assert (
        catalog({**env, "CATALOG_CACHE": env["CATALOG_CACHE"] + "-2"}, "resolve", *USED, "--format", "cyclonedx")
        == text
    )
    # A different set of models is a different document, serial number included.
    other = valid_cyclonedx(catalog(env, "resolve", "tiny-llama", "--format", "cyclonedx"))
    assert other["serialNumber"] != data["serialNumber"] and len(other["components"]) == 1


def test_the_signatures_verdict_is_in_the_bill(env: dict[str, str], tmp_path: Path) -> None:
    key = key_pair(tmp_path / "keys")
    catalog(env, "sign", "tiny-llama", "--private-key", str(key.private))
    data = valid_cyclonedx(
        catalog(env, "resolve", "tiny-llama", "--format", "cyclonedx", "--trusted-key", str(key.public))
    )
    (component,) = data["components"]
    verdict = props(component)["model-catalog:signature"]
    assert verdict == f"verified: signed by key {key.public}"


def test_intoto_binds_every_resolved_digest_to_the_request(env: dict[str, str], bundled: Catalog) -> None:
    statement = json.loads(catalog(env, "resolve", "tiny-llama", "tiny-qwen2", "--format", "intoto"))
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://model-catalog/resolve/v1"
    expected = sorted(f"{n}/{f.path}:{f.sha256}" for n in ("tiny-llama", "tiny-qwen2") for f in bundled.get(n).files)
    assert sorted(f"{s['name']}:{s['digest']['sha256']}" for s in statement["subject"]) == expected
    request = statement["predicate"]["request"]
    assert request["names"] == ["tiny-llama", "tiny-qwen2"] and request["layout"] == "dir"
    assert [m["purl"] for m in statement["predicate"]["models"]] == [
        f"pkg:huggingface/{bundled.get(n).source.hf_repo}@{bundled.get(n).source.revision}"
        for n in ("tiny-llama", "tiny-qwen2")
    ]


SESSION_TESTS = """\
import pytest

@pytest.mark.catalog_model("tiny-llama")
def test_marked(catalog_resolution):
    assert catalog_resolution.name == "tiny-llama"

def test_factory(catalog_model):
    assert catalog_model("tiny-qwen2").name == "tiny-qwen2"

@pytest.mark.catalog_model("tiny-llama")
def test_marked_again(catalog_resolution):
    pass

def test_no_model():
    pass

@pytest.mark.catalog_model("tiny-llama-sharded")
def test_deselected(catalog_resolution):
    pass
"""


def test_the_pytest_session_bill_lists_exactly_the_models_its_tests_used(env: dict[str, str], tmp_path: Path) -> None:
    project = tmp_path / "user-project"
    project.mkdir()
    (project / "test_models.py").write_text(textwrap.dedent(SESSION_TESTS))
    bill = tmp_path / "bom.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-k",
            "not deselected",
            "--catalog-bom",
            str(bill),
            "test_models.py",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = valid_cyclonedx(bill.read_text())
    assert sorted(props(c)["model-catalog:name"] for c in data["components"]) == ["tiny-llama", "tiny-qwen2"]
    assert "bill of materials of 2 model(s)" in done.stdout
