"""What a new user meets off the main path, through the CLI as they type it: an unreachable Hub, a registry as a
second store, `verify` of what is not cached, several models at once, the CI switch beside a flag, the hints and
summaries of sync, audit-upstream, check-load and publish, and the test suite beside a model of one's own."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from hubdouble import HubDouble
from oci_registry import RegistryServer
from signing_keys import key_pair

from catalog.formats import LoadFormat
from catalog.lookup import Catalog
from catalog_app.commands.check_load import render_markdown
from resolver.loaders import LoadReport
from resolver.stores import open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "catalog", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def user_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A user's shell: the bundled catalog, a cache and a home of the test's own, nothing of the machine's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "HF_", "DOCKER_"))}
    return (
        env
        | {
            "HOME": str(tmp_path / "home"),
            "HF_HOME": str(tmp_path / "hf"),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "DOCKER_CONFIG": str(tmp_path / "docker"),
            "CATALOG_DIR": str(ROOT / "manifests"),
            "CATALOG_CACHE": str(tmp_path / "cache"),
        }
        | extra
    )


@pytest.fixture
def closed_hub() -> str:
    """The address of a Hub that is gone: the double's port, closed."""
    double = HubDouble()
    double.close()
    return double.url


@pytest.fixture
def store(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> Path:
    """A folder store holding tiny-llama and tiny-sts, as `catalog sync` leaves them."""
    folder = tmp_path / "store"
    for name in ("tiny-llama", "tiny-sts"):
        upload_from_dir(bundled, name, sources[name], open_store(str(folder)))
    return folder


def scratch_catalog(tmp_path: Path, *names: str) -> Path:
    folder = tmp_path / "manifests"
    folder.mkdir()
    for name in ("catalog", *names):
        shutil.copy(ROOT / "manifests" / f"{name}.yaml", folder)
    return folder


# -- an unreachable Hub -------------------------------------------------------------------------------------------------
def test_add_with_the_hub_unreachable_is_one_error_naming_the_endpoint(closed_hub: str, tmp_path: Path) -> None:
    catalog_dir = scratch_catalog(tmp_path)
    done = cli(user_env(tmp_path, HF_ENDPOINT=closed_hub, CATALOG_DIR=str(catalog_dir)), "add", "org/name")
    assert done.returncode == 1, done.stderr
    error, hint = done.stderr.splitlines()
    assert error == f"error: resolving org/name@main: cannot reach the Hub at {closed_hub}: ConnectError"
    assert hint.startswith("hint: check the network and HF_ENDPOINT") and "--from-dir" in hint
    assert sorted(p.name for p in catalog_dir.iterdir()) == ["catalog.yaml"]


def test_a_list_import_with_the_hub_unreachable_refuses_each_line_and_asks_once(
    closed_hub: str, tmp_path: Path
) -> None:
    catalog_dir = scratch_catalog(tmp_path)
    listing = tmp_path / "models.txt"
    listing.write_text("org/first@main\norg/second\n")
    done = cli(
        user_env(tmp_path, HF_ENDPOINT=closed_hub, CATALOG_DIR=str(catalog_dir)), "import", "--repos", str(listing)
    )
    assert done.returncode == 1 and "internal error" not in done.stderr, done.stderr
    first, second, summary = done.stderr.splitlines()
    assert first.startswith(
        f"error: org/first@main: {listing}:1: resolving org/first@main: cannot reach the Hub at {closed_hub}"
    )
    assert second == (
        f"error: org/second@main: {listing}:2: not tried: the Hub at {closed_hub} gave no answer at {listing}:1"
    )
    assert summary == "0 written, 0 skipped, 2 refused"


def test_a_hub_failure_hints_at_the_hub_not_at_the_store(closed_hub: str, tmp_path: Path) -> None:
    done = cli(user_env(tmp_path, HF_ENDPOINT=closed_hub), "resolve", "tiny-sts", "--source", "hf")
    assert done.returncode == 1 and done.stderr.startswith("error: giving up on tiny-sts/"), done.stderr
    [hint] = [line for line in done.stderr.splitlines() if line.startswith("hint:")]
    assert "HF_ENDPOINT" in hint and "AWS_ENDPOINT_URL" not in hint and "--store" not in hint


@pytest.mark.parametrize("scheme", ["oci", "http"])
def test_an_unreachable_registry_or_http_store_is_not_hinted_as_s3(
    closed_hub: str, scheme: str, tmp_path: Path
) -> None:
    url = f"{scheme}://{closed_hub.split('://', 1)[1]}/ns/"  # a closed port, again
    done = cli(user_env(tmp_path), "resolve", "tiny-sts", "--store", url)
    assert done.returncode == 1 and "connection refused" in done.stderr and "AWS_ENDPOINT_URL" not in done.stderr, (
        done.stderr
    )
    if scheme == "http":  # the files' GETs fail
        assert done.stderr.startswith("error: giving up on tiny-sts/"), done.stderr
        assert done.stderr.splitlines()[-1] == (
            "hint: the store is unreachable or failing; retry later or check its URL (--store, --mirror, catalog.yaml)"
        )
    else:  # a registry is asked for the model's manifest first
        assert (
            done.stderr.startswith("error: cannot reach ")
            and done.stderr.splitlines()[-1] == "hint: check the URL and the network"
        ), done.stderr


def test_a_sync_whose_hub_fails_hints_once_at_from_dir(closed_hub: str, tmp_path: Path) -> None:
    done = cli(user_env(tmp_path, HF_ENDPOINT=closed_hub), "sync", "tiny-llama", "--store", str(tmp_path / "store"))
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert sum(line.startswith("error: giving up on tiny-llama/") for line in lines) == 6  # one per file
    hints = [line for line in lines if line.startswith("hint:")]
    assert (
        len(hints) == 2 and "HF_ENDPOINT" in hints[0] and "AWS_ENDPOINT_URL" not in done.stderr
    )  # said once, not per file
    assert "without --from-dir the files come from the Hub" in hints[1] and "catalog sync --from-dir DIR" in hints[1]


# -- a registry as the second store -------------------------------------------------------------------------------------
def test_replicate_to_a_registry_from_the_cli(
    oci_registry: RegistryServer, store: Path, bundled: Catalog, tmp_path: Path
) -> None:
    target = f"oci://{oci_registry.host}/replica-{uuid.uuid4().hex[:10]}/"
    env = user_env(tmp_path)
    copied = cli(env, "sync", "--replicate-to", target, "tiny-llama", "--store", str(store))
    assert copied.returncode == 0, copied.stderr
    assert cli(env, "sync", "--check", "tiny-llama", "--store", target).returncode == 0  # the registry holds every pin
    done = cli(
        env | {"CATALOG_CACHE": str(tmp_path / "fresh")}, "resolve", "tiny-llama", "--store", target, "--format", "json"
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert set(answer["sources"].values()) == {target}  # every file from the registry, none from the first store
    for entry in bundled.get("tiny-llama").files:
        assert hashlib.sha256((Path(answer["path"]) / entry.path).read_bytes()).hexdigest() == entry.sha256


# -- verify what is not cached ------------------------------------------------------------------------------------------
def test_verify_of_a_model_not_in_the_cache_fails_naming_it(store: Path, tmp_path: Path) -> None:
    catalog_dir = scratch_catalog(tmp_path, "tiny-llama", "tiny-sts")
    keys = key_pair(tmp_path / "keys")
    env = user_env(tmp_path, CATALOG_DIR=str(catalog_dir), CATALOG_STORE=str(store))
    assert cli(env, "sign", "tiny-llama", "--private-key", str(keys.private)).returncode == 0
    for extra in ((), ("--signatures", "--trusted-key", str(keys.public))):
        missing = cli(env, "verify", "tiny-llama", *extra)
        assert missing.returncode == 1, missing.stderr
        assert missing.stdout.startswith(f"tiny-llama: not in the cache at {tmp_path / 'cache'}")
        assert "catalog resolve tiny-llama" in missing.stdout and "1 problem(s)" in missing.stderr
    assert cli(env, "resolve", "tiny-llama").returncode == 0
    assert cli(env, "verify", "tiny-llama").returncode == 0
    assert cli(env, "verify", "tiny-llama", "--signatures", "--trusted-key", str(keys.public)).returncode == 0
    other = cli(env, "verify", "tiny-llama", "tiny-sts")  # one cached, one not: the one not is the problem
    assert other.returncode == 1 and other.stdout.startswith("tiny-sts: not in the cache")


# -- several models -----------------------------------------------------------------------------------------------------
def test_resolve_of_several_names_prints_a_path_per_line_and_json_is_an_array(store: Path, tmp_path: Path) -> None:
    env = user_env(tmp_path, CATALOG_STORE=str(store))
    paths = cli(env, "resolve", "tiny-llama", "tiny-sts")
    assert paths.returncode == 0, paths.stderr
    lines = paths.stdout.splitlines()
    assert len(lines) == 2 and all(Path(line).is_dir() for line in lines)
    assert lines[0] == cli(env, "resolve", "tiny-llama").stdout.strip()
    assert cli(env, "resolve", "tiny-llama", "tiny-sts").stdout == paths.stdout  # the warm answer, the same lines
    one = json.loads(cli(env, "resolve", "tiny-sts", "--format", "json").stdout)
    several = json.loads(cli(env, "resolve", "tiny-llama", "tiny-sts", "--format", "json").stdout)
    assert one["name"] == "tiny-sts" and [r["name"] for r in several] == ["tiny-llama", "tiny-sts"]
    alone = scratch_catalog(tmp_path, "tiny-sts")
    every = cli(env | {"CATALOG_DIR": str(alone)}, "resolve", "--all", "--format", "json")
    assert [r["name"] for r in json.loads(every.stdout)] == ["tiny-sts"]  # --all: an array, even of one
    engine = cli(env, "resolve", "tiny-llama", "tiny-sts", "--format", "vllm-args")
    assert engine.returncode == 2 and "prints one model" in engine.stderr


# -- the CI switch beside a flag ----------------------------------------------------------------------------------------
def test_a_source_flag_wins_over_catalog_mode_offline_and_errors_name_what_was_set(store: Path, tmp_path: Path) -> None:
    env = user_env(tmp_path, CATALOG_STORE=str(store), CATALOG_MODE="offline")
    offline = cli(env, "resolve", "tiny-llama")
    assert offline.returncode == 1 and offline.stderr.startswith("error: CATALOG_MODE=offline: 6 of tiny-llama's files")
    flagged = cli(env | {"CATALOG_MODE": "ci"}, "resolve", "tiny-llama", "--offline")
    assert flagged.returncode == 1 and flagged.stderr.startswith("error: --offline: 6 of tiny-llama's files")
    online = cli(env, "resolve", "tiny-llama", "--source", "store")
    assert online.returncode == 0 and Path(online.stdout.strip()).is_dir(), online.stderr
    both = cli(
        env | {"CATALOG_CACHE": str(tmp_path / "other")}, "resolve", "tiny-llama", "--source", "store", "--offline"
    )
    assert both.returncode == 1 and both.stderr.startswith("error: --offline: ")


# -- summaries ----------------------------------------------------------------------------------------------------------
def test_audit_upstream_takes_all_and_counts_models_and_pins_apart(
    hub: HubDouble, bundled: Catalog, tmp_path: Path
) -> None:
    env = user_env(tmp_path, HF_ENDPOINT=hub.url)
    assert cli(env, "audit-upstream", "--all", "--no-record").returncode == 0
    assert cli(env, "audit-upstream", "tiny-llama", "--all", "--no-record").returncode == 2
    hub.delete_repo("model-catalog/tiny-llama")
    done = cli(env, "audit-upstream", "--all", "--no-record")
    lost = sorted(m.name for m in bundled if m.source.hf_repo == "model-catalog/tiny-llama")
    pins = {(m.source.hf_repo, m.source.revision) for m in bundled}
    assert done.returncode == 1 and len(lost) == 3 and len(pins) < len(bundled)
    assert done.stderr.startswith(f"3 models of {len(bundled)} (1 pin of {len(pins)}) not ok upstream: ")


def test_check_load_markdown_shows_no_counted_zeros_for_an_engine_load() -> None:
    by_engine = LoadReport(
        "tiny-llama",
        LoadFormat.SAFETENSORS,
        seconds=12.5,
        uri="/cache/models/tiny-llama",
        engine="vllm: generated 8 tokens",
    )
    own = LoadReport(
        "tiny-qwen2", LoadFormat.SAFETENSORS, tensors=21, bytes=2_097_152, seconds=0.5, throughput_mib_s=4.0
    )
    rows = render_markdown([by_engine, own]).splitlines()[-2:]
    assert rows[0] == "| tiny-llama | safetensors | ok | - | - | 12.500 s | - | vllm: generated 8 tokens |"
    assert rows[1] == "| tiny-qwen2 | safetensors | ok | 21 | 2.0 MiB | 0.500 s | 4.0 MiB/s |  |"


def test_publish_clean_says_what_it_removed(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    (tier / "tmp").mkdir(parents=True)
    left = tier / "tmp" / "999999999-abandoned"  # a publisher's temp file whose process is gone
    left.write_bytes(b"half")
    env = user_env(tmp_path)
    first = cli(env, "publish", "--clean", "--to", str(tier))
    assert first.returncode == 0 and first.stdout == f"removed {left}\n"
    assert first.stderr == f"cleaned {tier}: removed 1 temp file that killed publishers left\n"
    again = cli(env, "publish", "--clean", "--to", str(tier))
    assert (
        again.returncode == 0 and again.stderr == f"cleaned {tier}: removed 0 temp files that killed publishers left\n"
    )
    nowhere = cli(env, "publish", "--clean", "--to", str(tmp_path / "typo"))
    assert nowhere.stderr == f"nothing to clean: {tmp_path / 'typo'} is no folder\n"


# -- the test suite beside a model of one's own -------------------------------------------------------------------------
def test_the_suite_refuses_at_once_a_manifest_beside_the_bundled_set(tmp_path: Path) -> None:
    """A checkout's tests/ and manifests/, a model of one's own added to the latter: one line up front, no test run."""
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "manifests", checkout / "manifests")
    (checkout / "tests").mkdir()
    for helper in ("conftest.py", "hubdouble.py", "oci_registry.py", "servers.py"):
        shutil.copy(ROOT / "tests" / helper, checkout / "tests")
    (checkout / "tests" / "test_one.py").write_text("def test_one():\n    pass\n")
    run = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "tests/test_one.py"]
    assert subprocess.run(run, cwd=checkout, capture_output=True, text=True, timeout=300).returncode == 0
    shutil.copy(checkout / "manifests" / "tiny-llama.yaml", checkout / "manifests" / "my-llama.yaml")
    done = subprocess.run(run, cwd=checkout, capture_output=True, text=True, timeout=300)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert f"{checkout / 'manifests'} holds my-llama.yaml beside the bundled models" in done.stdout + done.stderr
    assert "passed" not in done.stdout
