"""`catalog audit-upstream` against the Hub double: every class of upstream loss, one request per pin, rate limits,
and the record it leaves in the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import manifest_text, write_catalog
from hubdouble import HubDouble

from resolver.last_copy import read_record
from resolver.stores import open_store

REV = "0123456789abcdef0123456789abcdef01234567"
CASES = {  # model -> its class after the double has done to its repo what the fixture does
    "fine": "ok",
    "deleted": "deleted",
    "gated": "gated",
    "private": "private",
    "rewritten": "revision-gone",
    "renamed": "moved",
    "flaky": "unreachable",
}


@pytest.fixture
def hub() -> Iterator[HubDouble]:
    double = HubDouble()
    for name in CASES:
        double.add_files(f"org/{name}", REV, {"config.json": b"{}"})
    double.add_files("org/rewritten", "c" * 40, {"config.json": b"{}"})
    yield double
    double.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return write_catalog(tmp_path, {f"{name}.yaml": manifest_text(name) for name in CASES})


def lose(hub: HubDouble) -> None:
    hub.delete_repo("org/deleted")
    hub.gate("org/gated")
    hub.make_private("org/private")
    hub.drop_revision("org/rewritten", REV)
    hub.rename("org/renamed", "org/new-name")
    hub.fail(503, times=1000, retry_after=0, path_contains="/org/flaky/")


def audit(
    hub: HubDouble, folder: Path, store: Path, *args: str, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "CATALOG_"))}
    # huggingface_hub's telemetry asks the Hub for a registry once a day: off, so the double counts only the audit
    env |= {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(folder.parent / "hf"),
        "HOME": str(folder.parent),
        "CATALOG_DIR": str(folder),
        "CATALOG_STORE": str(store),
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    if token:
        env["HF_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "catalog", "audit-upstream", *args], env=env, capture_output=True, text=True, timeout=300
    )


def metadata_requests(hub: HubDouble) -> dict[str, int]:
    return {k.split("/")[4]: n for k, n in hub.requests.items() if "/revision/" in k}


def test_each_class_of_upstream_loss_is_named_with_one_request_per_pin(
    hub: HubDouble, folder: Path, tmp_path: Path
) -> None:
    lose(hub)
    store = tmp_path / "store"
    done = audit(hub, folder, store, "--format", "json")
    assert done.returncode == 1, done.stderr
    answer = json.loads(done.stdout)
    assert {p["name"]: p["upstream"] for p in answer["pins"]} == CASES
    details = {p["name"]: p["detail"] for p in answer["pins"]}
    assert details["renamed"] == "renamed to org/new-name"
    assert "private, or deleted" in details["private"] and "HF_TOKEN" in details["private"]
    assert metadata_requests(hub) == {
        name: 5 if name == "flaky" else 1 for name in CASES
    }  # 503s retried as lock retries
    record = read_record(open_store(str(store)))
    assert {n: r.upstream for n, r in record.items()} == CASES
    assert {n for n, r in record.items() if r.gone} == {"deleted", "gated", "private", "rewritten"}
    assert all(r.gone_since == answer["audited_at"] for r in record.values() if r.gone)
    assert record["deleted"].prefix == "org/deleted/"  # what the guard protects: the prefix key in the store

    text = audit(hub, folder, store, "--no-record")
    rows = {line.split()[0]: line.split(None, 3)[1:] for line in text.stdout.splitlines()}
    assert text.returncode == 1 and rows["deleted"] == [
        "deleted",
        "org/deleted@0123456789ab",
        "deleted (404 RepoNotFound)",
    ]
    assert "6 models of 7 (6 pins of 7) not ok upstream" in text.stderr
    markdown = audit(hub, folder, store, "deleted", "fine", "--format", "markdown", "--no-record")
    assert (
        "| deleted | **deleted** | org/deleted@0123456789ab |" in markdown.stdout and "| fine | ok |" in markdown.stdout
    )


def test_an_unreachable_hub_never_replaces_what_an_audit_learned(hub: HubDouble, folder: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert audit(hub, folder, store, "fine", "deleted").returncode == 0
    hub.delete_repo("org/deleted")
    first = audit(hub, folder, store, "deleted", "--format", "json")
    assert first.returncode == 1
    since = read_record(open_store(str(store)))["deleted"].gone_since
    assert since == json.loads(first.stdout)["audited_at"]
    hub.fail(503, times=1000, retry_after=0)
    outage = audit(hub, folder, store, "--format", "json")
    assert {p["name"]: p["upstream"] for p in json.loads(outage.stdout)["pins"]} == dict.fromkeys(CASES, "unreachable")
    record = read_record(open_store(str(store)))
    assert record["deleted"].upstream == "deleted" and record["deleted"].gone_since == since
    assert (
        record["fine"].upstream == "ok" and record["gated"].upstream == "unreachable"
    )  # nothing known before: said as is
    asked = hub.hub_requests()
    shown = audit(hub, folder, store, "--recorded", "--format", "json")
    assert shown.returncode == 0 and hub.hub_requests() == asked
    assert {p["name"]: p["upstream"] for p in json.loads(shown.stdout)["pins"]}["deleted"] == "deleted"


def test_a_rate_limit_past_the_wait_stops_the_audit_after_one_request(
    hub: HubDouble, folder: Path, tmp_path: Path
) -> None:
    hub.rate_limit(reset=3600, times=1000)
    done = audit(hub, folder, tmp_path / "store", "--format", "json")
    assert done.returncode == 1
    pins = json.loads(done.stdout)["pins"]
    assert {p["upstream"] for p in pins} == {"unreachable"} and all("resets in 3600s" in p["detail"] for p in pins)
    assert hub.hub_requests() == 1


def test_a_short_rate_limit_is_waited_out(hub: HubDouble, folder: Path, tmp_path: Path) -> None:
    hub.rate_limit(reset=1, times=1)
    done = audit(hub, folder, tmp_path / "store", "fine", "--format", "json")
    assert done.returncode == 0 and json.loads(done.stdout)["pins"][0]["upstream"] == "ok"
    assert metadata_requests(hub) == {"fine": 2}


def test_a_gated_repo_is_ok_only_for_a_token_proven_granted_by_one_head_of_a_pinned_file(
    hub: HubDouble, folder: Path, tmp_path: Path
) -> None:
    """Attacked: any HF_TOKEN (one with no access) made a gated repo `ok`, its grant unchecked, replacing `gated`; CI
    always sets a token, so a gated repo's last copy was never protected. Its metadata answers every token alike."""
    hub.gate("org/gated", granted=("hf_granted",))
    anonymous = audit(hub, folder, tmp_path / "store", "gated", "--format", "json", "--no-record")
    assert json.loads(anonymous.stdout)["pins"][0]["upstream"] == "gated"
    heads = sum(n for k, n in hub.requests.items() if k.startswith("HEAD "))
    refused = audit(hub, folder, tmp_path / "store", "gated", "--format", "json", "--no-record", token="hf_no_access")
    pin = json.loads(refused.stdout)["pins"][0]
    assert refused.returncode == 1 and pin["upstream"] == "gated", pin
    assert "this token is not granted access (401 on HEAD config.json)" in pin["detail"]
    granted = audit(hub, folder, tmp_path / "store", "gated", "--format", "json", "--no-record", token="hf_granted")
    pin = json.loads(granted.stdout)["pins"][0]
    assert granted.returncode == 0 and pin["upstream"] == "ok" and "this token was granted access" in pin["detail"]
    assert (
        sum(n for k, n in hub.requests.items() if k.startswith("HEAD ")) - heads == 2
    )  # one HEAD per audit with a token
    assert "hf_no_access" not in refused.stdout + refused.stderr and "hf_granted" not in granted.stdout + granted.stderr
