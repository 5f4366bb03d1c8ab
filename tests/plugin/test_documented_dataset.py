"""docs/testing.md's way to load a dataset, the expression exactly as the page writes it, in a user's pytest run with
the real `datasets` library and the plugin's `catalog_model` fixture."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from catalog.lookup import Catalog
from resolver.stores import open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]
NAME = "tiny-sts"


def documented_expression() -> str:
    """The `datasets.load_dataset(...)` code span of docs/testing.md."""
    [expression] = re.findall(r"`(datasets\.load_dataset\([^`]*\))`", (ROOT / "docs" / "testing.md").read_text())
    return expression


def test_the_documented_dataset_line_loads_the_pinned_splits(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    upload_from_dir(bundled, NAME, sources[NAME], open_store(str(store)))
    rows = {
        split: len((sources[NAME] / "data" / f"{split}.jsonl").read_text().splitlines()) for split in ("train", "test")
    }
    project = tmp_path / "user-project"
    project.mkdir()
    (project / "test_data.py").write_text(
        textwrap.dedent(f"""\
        import datasets


        def test_load(catalog_model):
            data = {documented_expression()}
            assert {{split: data[split].num_rows for split in data}} == {rows!r}
        """)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "HF_"))}
    env |= {
        "CATALOG_DIR": str(ROOT / "manifests"),
        "CATALOG_STORE": str(store),
        "CATALOG_CACHE": str(tmp_path / "cache"),
        "CATALOG_GPU_CLASS": "cpu",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "test_data.py"],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout
