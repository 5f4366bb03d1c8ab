"""The warm resolve answered by `catalog.fast` before click, pydantic or boto3 load; any changed input
sends the call to the full CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from catalog.lookup import Catalog
from resolver.stores import open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import sys, json, runpy\n"
    "sys.argv = ['catalog'] + sys.argv[1:]\n"
    "try:\n    runpy.run_module('catalog', run_name='__main__')\n    code = 0\nexcept SystemExit as e:\n    code = e.code or 0\n"
    "heavy = [m for m in ('pydantic', 'click', 'yaml', 'boto3', 'botocore', 'huggingface_hub') if m in sys.modules]\n"
    "print(json.dumps({'code': code, 'heavy': heavy}), file=sys.stderr)\n"
)


@pytest.fixture
def setup(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> tuple[dict[str, str], Path]:
    upload_from_dir(bundled, "tiny-llama", sources["tiny-llama"], open_store(str(tmp_path / "store")))
    catalog_dir = tmp_path / "manifests"
    shutil.copytree(ROOT / "manifests", catalog_dir)
    env = {**os.environ, "CATALOG_DIR": str(catalog_dir), "CATALOG_STORE": str(tmp_path / "store"), "CATALOG_CACHE": str(tmp_path / "cache")}
    return env, catalog_dir


def probe(env: dict[str, str], *args: str) -> tuple[str, dict[str, object]]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env)
    return done.stdout, json.loads(done.stderr.strip().splitlines()[-1])


def test_second_resolve_is_answered_without_heavy_imports(setup: tuple[dict[str, str], Path]) -> None:
    env, _ = setup
    cold_out, cold = probe(env, "resolve", "tiny-llama", "--format", "json")
    assert cold["code"] == 0 and "pydantic" in cold["heavy"]  # the first call takes the full path
    warm_out, warm = probe(env, "resolve", "tiny-llama", "--format", "json")
    assert warm == {"code": 0, "heavy": []}
    assert warm_out == cold_out


def test_a_changed_manifest_or_view_file_goes_to_the_full_cli(setup: tuple[dict[str, str], Path]) -> None:
    env, catalog_dir = setup
    out, _ = probe(env, "resolve", "tiny-llama")
    manifest = catalog_dir / "tiny-llama.yaml"
    manifest.write_text(manifest.read_text().replace("description:", "# edited\ndescription:"))
    _, after_edit = probe(env, "resolve", "tiny-llama")
    assert "pydantic" in after_edit["heavy"]
    _, again = probe(env, "resolve", "tiny-llama")
    assert again["heavy"] == []  # re-recorded
    config = Path(out.strip()) / "config.json"
    os.chmod(config, 0o644)
    config.write_text("{}")
    repaired_out, repaired = probe(env, "resolve", "tiny-llama")
    assert repaired["code"] == 0 and "pydantic" in repaired["heavy"]
    assert json.loads((Path(repaired_out.strip()) / "config.json").read_text())["model_type"] == "llama"


def test_flags_it_does_not_know_go_to_the_full_cli(setup: tuple[dict[str, str], Path]) -> None:
    env, _ = setup
    probe(env, "resolve", "tiny-llama")
    _, verbose = probe(env, "-v", "resolve", "tiny-llama")
    assert "click" in verbose["heavy"]
