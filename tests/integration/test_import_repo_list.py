"""`catalog import --repos FILE`: a list of models pinned from the Hub double as `catalog add` pins them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hubdouble import HubDouble

from catalog.lookup import Catalog

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def hub(bundled: Catalog, sources: dict[str, Path]) -> Iterator[HubDouble]:
    double = HubDouble()
    for name in ("tiny-llama", "tiny-qwen2", "all-minilm-l6-v2"):
        m = bundled.get(name)
        double.add_repo(m.source.hf_repo, m.source.revision, sources[name])
    yield double
    double.close()


def run(hub: HubDouble, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "CATALOG_"))}
    env |= {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(folder.parent / "hf"),
        "HOME": str(folder.parent),
        "CATALOG_DIR": str(folder),
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "catalog", *args], env=env, capture_output=True, text=True, timeout=300
    )


def test_a_list_is_pinned_branch_once_then_left_alone(hub: HubDouble, bundled: Catalog, tmp_path: Path) -> None:
    folder = tmp_path / "manifests"
    folder.mkdir()
    shutil.copy(ROOT / "manifests" / "catalog.yaml", folder)
    llama, qwen, minilm = (bundled.get(n) for n in ("tiny-llama", "tiny-qwen2", "all-minilm-l6-v2"))
    listing = tmp_path / "models.txt"
    listing.write_text(
        f"# what our tests load\n{llama.source.hf_repo}@main --gpu cpu\n\n"
        f"{qwen.source.hf_repo}@{qwen.source.revision} h100   # a commit and a class column\n"
        f"{minilm.source.hf_repo}\n"
    )
    done = run(hub, folder, "import", "--repos", str(listing))
    assert done.returncode == 0, done.stdout + done.stderr
    for m, gpu in ((llama, "cpu"), (qwen, "h100"), (minilm, "l4")):
        data = yaml.safe_load((folder / f"{m.name}.yaml").read_text())
        assert data["source"]["revision"] == m.source.revision and data["gpu"] == {"class": gpu}
        pinned = {f["path"]: (f["size"], f["sha256"]) for f in data["files"]}
        for entry in m.files:  # everything the bundled manifest pins (add's excludes may keep more small files)
            assert pinned[entry.path] == (entry.size, entry.sha256)
    revision_asks = {k: n for k, n in hub.requests.items() if "/revision/" in k}
    assert revision_asks == {
        f"GET /api/models/{llama.source.hf_repo}/revision/main": 1,
        f"GET /api/models/{minilm.source.hf_repo}/revision/main": 1,
    }  # the commit line: no lookup

    asked = hub.hub_requests()
    again = run(hub, folder, "import", "--repos", str(listing))
    assert again.returncode == 0 and again.stdout.count("skipped") == 3
    assert "the list's 'main' is not followed" in again.stdout
    assert hub.hub_requests() == asked  # a re-run of the list asks the Hub nothing


def test_a_bad_line_names_file_and_line_and_pins_nothing(hub: HubDouble, tmp_path: Path) -> None:
    folder = tmp_path / "manifests"
    folder.mkdir()
    shutil.copy(ROOT / "manifests" / "catalog.yaml", folder)
    listing = tmp_path / "models.txt"
    listing.write_text("model-catalog/tiny-llama\nnot a repo\nmodel-catalog/tiny-qwen2 --gpu tpu9\n")
    done = run(hub, folder, "import", "--repos", str(listing))
    assert done.returncode == 2
    assert f"{listing}:2:" in done.stderr and f"{listing}:3: unknown GPU class 'tpu9'" in done.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["catalog.yaml"] and hub.hub_requests() == 0


def test_a_failing_line_is_reported_and_the_others_go_on(hub: HubDouble, tmp_path: Path) -> None:
    folder = tmp_path / "manifests"
    folder.mkdir()
    shutil.copy(ROOT / "manifests" / "catalog.yaml", folder)
    listing = tmp_path / "models.txt"
    listing.write_text("org/no-such-model\nmodel-catalog/tiny-llama\n")
    done = run(hub, folder, "import", "--repos", str(listing))
    assert done.returncode == 1
    assert f"error: org/no-such-model@main: {listing}:1:" in done.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["catalog.yaml", "tiny-llama.tensors.json", "tiny-llama.yaml"]
