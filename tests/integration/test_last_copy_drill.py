"""The drill: the Hub deletes, then gates, a repo in the middle of a CI run. `ci`-mode resolves and the pytest
plugin keep working with zero Hub requests; `audit-upstream` names the models and their class; a prune, an
orphan cleanup and a hand-edited plan that would delete their objects are refused; a replica keeps a second
copy. Against SeaweedFS and the Hub double, through the CLI as CI runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hubdouble import HubDouble
from servers import SeaweedServer, new_bucket

from catalog.lookup import Catalog
from resolver.last_copy import RECORD_KEY
from resolver.stores import S3Options, make_s3_client

ROOT = Path(__file__).resolve().parents[2]
REPO = "model-catalog/tiny-llama"
PINNING_IT = {"tiny-llama", "tiny-llama-sharded", "tiny-llama-tensorizer"}

USER_TEST = """\
import hashlib

import pytest

import catalog


@pytest.mark.catalog_model("tiny-llama")
def test_the_model_is_there_and_verified(catalog_resolution):
    for entry in catalog.load().get("tiny-llama").files:
        assert hashlib.sha256((catalog_resolution.path / entry.path).read_bytes()).hexdigest() == entry.sha256
"""


class Run:
    """The CI run's environment: its own catalog copy, the bucket, a fresh cache per step."""

    def __init__(self, hub: HubDouble, bucket: str, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.catalog = tmp_path / "manifests"
        shutil.copytree(ROOT / "manifests", self.catalog)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "CATALOG_"))}
        self.env = env | {
            "HF_ENDPOINT": hub.url,
            "HF_HOME": str(tmp_path / "hf"),
            "HOME": str(tmp_path),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "CATALOG_DIR": str(self.catalog),
            "CATALOG_STORE": f"s3://{bucket}/",
            "CATALOG_MODE": "ci",
            "CATALOG_GPU_CLASS": "cpu",
        }
        self.steps = 0

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        self.steps += 1
        env = self.env | {"CATALOG_CACHE": str(self.tmp / f"cache-{self.steps}")}
        return subprocess.run(
            [sys.executable, "-m", "catalog", *args], env=env, capture_output=True, text=True, timeout=300
        )

    def pytest(self) -> subprocess.CompletedProcess[str]:
        project = self.tmp / "engine-tests"
        project.mkdir(exist_ok=True)
        (project / "test_models.py").write_text(USER_TEST)
        env = self.env | {"CATALOG_CACHE": str(self.tmp / "plugin-cache")}
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_models.py"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )


def keys(s3_server: SeaweedServer, bucket: str) -> set[str]:
    client: Any = make_s3_client(S3Options(endpoint_url=s3_server.url, addressing_style="path"))
    return {
        o["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for o in page.get("Contents", [])
    }


def classes(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    return {p["name"]: p["upstream"] for p in json.loads(done.stdout)["pins"]}


def test_the_drill(hub: HubDouble, bundled: Catalog, s3_server: SeaweedServer, tmp_path: Path) -> None:
    bucket = new_bucket(s3_server.url)
    run = Run(hub, bucket, tmp_path)
    assert run.cli("sync").returncode == 0
    first = run.cli("audit-upstream", "--format", "json")
    assert first.returncode == 0 and set(classes(first).values()) == {"ok"}

    hub.delete_repo(REPO)  # mid-run: the next steps of the same run meet a Hub without the repo
    asked = hub.hub_requests()
    resolved = run.cli("resolve", "tiny-llama", "tiny-llama-tensorizer", "--format", "json")
    assert resolved.returncode == 0, resolved.stderr
    assert {r["name"] for r in json.loads(resolved.stdout)} == {"tiny-llama", "tiny-llama-tensorizer"}
    plugin = run.pytest()
    assert plugin.returncode == 0 and "1 passed" in plugin.stdout, plugin.stdout + plugin.stderr
    assert hub.hub_requests() == asked  # ci mode: the bucket only, not one Hub request

    audit = run.cli("audit-upstream", "--format", "json")
    assert audit.returncode == 1
    assert classes(audit) == {m.name: "deleted" if m.name in PINNING_IT else "ok" for m in bundled}
    assert hub.hub_requests() - asked == len(
        {(m.source.hf_repo, m.source.revision) for m in bundled}
    )  # one request per pin

    # What a cleanup would delete: an object under tiny-llama's prefix no manifest pins, and (its manifest removed
    # from the catalog) every object of tiny-llama-tensorizer, orphans now.
    llama = bundled.get("tiny-llama")
    tensorizer = {
        bundled.store_key(bundled.get("tiny-llama-tensorizer"), e.path)
        for e in bundled.get("tiny-llama-tensorizer").files
    }
    extra = bundled.store_key(llama, "notes.txt")
    client: Any = make_s3_client(S3Options(endpoint_url=s3_server.url, addressing_style="path"))
    client.put_object(Bucket=bucket, Key=extra, Body=b"kept by hand")
    (run.catalog / "tiny-llama-tensorizer.yaml").unlink()
    before = keys(s3_server, bucket)

    pruned = run.cli("sync", "--prune", "--delete-orphans")
    assert pruned.returncode == 2
    assert "the plan deletes the last copy of what the Hub no longer serves" in pruned.stderr
    assert (
        "1 object(s) of tiny-llama (" in pruned.stderr
        and f"{len(tensorizer)} object(s) of tiny-llama-tensorizer (" in pruned.stderr
    )
    assert "--allow-last-copy-deletion tiny-llama --allow-last-copy-deletion tiny-llama-tensorizer" in pruned.stderr
    assert keys(s3_server, bucket) == before

    plan = tmp_path / "plan.json"
    assert run.cli("sync", "--out", str(plan)).returncode == 0  # a plan that deletes nothing ...
    edited = json.loads(plan.read_text()) | {"prune": True, "delete_orphans": True}  # ... edited by hand to delete
    plan.write_text(json.dumps(edited))
    by_hand = run.cli("sync", "--apply", str(plan), "--allow-last-copy-deletion", "tiny-llama")
    assert (
        by_hand.returncode == 2
        and "of tiny-llama-tensorizer (" in by_hand.stderr
        and "of tiny-llama (" not in by_hand.stderr
    )
    assert keys(s3_server, bucket) == before

    second = new_bucket(s3_server.url)  # keep two copies of what only we still have
    copied = run.cli("sync", "--replicate-to", f"s3://{second}/", "tiny-llama", "--format", "json")
    assert copied.returncode == 0, copied.stderr
    assert {bundled.store_key(llama, e.path) for e in llama.files} | {RECORD_KEY} <= keys(s3_server, second)
    assert run.cli("resolve", "tiny-llama", "--store", f"s3://{second}/").returncode == 0
    assert hub.hub_requests() - asked == 4  # the audit's; replication and the resolve asked nothing

    allowed = run.cli(
        "sync",
        "--prune",
        "--delete-orphans",
        "--allow-last-copy-deletion",
        "tiny-llama",
        "--allow-last-copy-deletion",
        "tiny-llama-tensorizer",
        "--format",
        "json",
    )
    assert allowed.returncode == 0, allowed.stderr
    assert set(json.loads(allowed.stdout)["deleted"]) == tensorizer | {extra}

    hub.restore(REPO)
    hub.gate(REPO)  # back, but gated
    gated = run.cli("audit-upstream", "--format", "json")
    assert {n: c for n, c in classes(gated).items() if c != "ok"} == {
        "tiny-llama": "gated",
        "tiny-llama-sharded": "gated",
    }
    assert run.cli("resolve", "tiny-llama").returncode == 0
    recorded = run.cli("audit-upstream", "--recorded", "--format", "json")
    pins = {p["name"]: p for p in json.loads(recorded.stdout)["pins"]}
    assert (
        pins["tiny-llama"]["upstream"] == "gated"
        and pins["tiny-llama"]["gone_since"] == json.loads(audit.stdout)["audited_at"]
    )
    assert pins["tiny-llama-tensorizer"]["upstream"] == "deleted"  # removed from the catalog: its entry stays


def test_an_unchecked_grant_never_frees_a_last_copy(hub: HubDouble, tmp_path: Path) -> None:
    """Attacked: a gated repo audited with an HF_TOKEN that has no access was recorded `ok` (its grant unchecked),
    replacing `gated`; with its manifest removed, `sync --prune --delete-orphans` deleted every object of it."""
    store = tmp_path / "store"
    run = Run(hub, "unused", tmp_path)
    run.env |= {"CATALOG_STORE": str(store), "HF_TOKEN": "hf_no_access"}
    assert run.cli("sync", "tiny-qwen2").returncode == 0
    hub.gate("model-catalog/tiny-qwen2")  # its metadata still answers this token; its files do not
    audit = run.cli("audit-upstream", "tiny-qwen2", "--format", "json")
    assert audit.returncode == 1 and classes(audit) == {"tiny-qwen2": "gated"}, audit.stdout + audit.stderr
    for leftover in run.catalog.glob("tiny-qwen2.*"):
        leftover.unlink()
    before = sorted(p for p in store.rglob("*") if p.is_file())
    pruned = run.cli("sync", "--prune", "--delete-orphans")
    assert pruned.returncode == 2 and "object(s) of tiny-qwen2 (model-catalog/tiny-qwen2@" in pruned.stderr, (
        pruned.stderr
    )
    assert sorted(p for p in store.rglob("*") if p.is_file()) == before
