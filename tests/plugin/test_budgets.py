"""Ready-time budgets and baselines as a test suite meets them: `catalog_ready` holds resolve plus engine start to the
profile's budget for this machine's class (over it, the test fails with both figures and the manifest line), and
`catalog_baseline` holds a measurement to the manifest's expected metric; the session report carries both."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from catalog import yamlsource
from catalog.lookup import Catalog
from resolver.stores import open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]

BASELINE = """\
baselines:
  - metric: accuracy
    dataset: tiny-sts
    split: test
    value: 0.7
    tolerance: 0.02
files:
"""

SUITE = """\
import time


def test_over_budget(catalog_ready):
    with catalog_ready("tiny-llama") as r:
        assert "--dtype" in r.profile.args
        time.sleep(0.3)  # the engine's start, slower than the 0.1 s the profile allows


def test_within_budget(catalog_ready):
    with catalog_ready("tiny-qwen2"):
        pass


def test_baseline_holds(catalog_baseline):
    catalog_baseline("tiny-llama", "accuracy", 0.71, dataset="tiny-sts")


def test_baseline_moved(catalog_baseline):
    catalog_baseline("tiny-llama", "accuracy", 0.61)
"""


def test_budgets_and_baselines_fail_with_both_figures(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    shutil.copytree(ROOT / "manifests", project / "manifests")
    llama = project / "manifests" / "tiny-llama.yaml"
    text = (
        llama.read_text()
        .replace("ready_budget_s: 300", "ready_budget_s: 0.1")
        .replace("\nfiles:\n", "\n" + BASELINE, 1)
    )
    llama.write_text(text)
    lines = yamlsource.parse(text).lines
    (project / "test_models.py").write_text(SUITE)
    store = open_store(str(tmp_path / "store"))
    for name in ("tiny-llama", "tiny-qwen2"):
        upload_from_dir(bundled, name, sources[name], store)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    env |= {
        "CATALOG_DIR": str(project / "manifests"),
        "CATALOG_STORE": str(tmp_path / "store"),
        "CATALOG_CACHE": str(tmp_path / "cache"),
        "CATALOG_GPU_CLASS": "cpu",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--catalog-report",
            "report.json",
            "test_models.py",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    out = done.stdout
    assert out.strip().splitlines()[-1].startswith("2 failed, 2 passed"), out + done.stderr
    budget_line = lines.line_of(("profiles", "cpu", "ready_budget_s"))
    assert re.search(
        r"tiny-llama was ready in 0\.[3-9] s, over its budget of 0\.1 s \(manifests/tiny-llama\.yaml:"
        rf"{budget_line}, the cpu profile\)",
        out,
    ), out
    assert (
        f"tiny-llama: accuracy on tiny-sts (test) is 0.61, expected 0.7 +/- 0.02 "
        f"(manifests/tiny-llama.yaml:{lines.line_of(('baselines', 0))})"
    ) in out
    report = {t["test"].split("::")[1]: t for t in json.loads((project / "report.json").read_text())["tests"]}
    over = report["test_over_budget"]["ready"][0]
    assert over["model"] == "tiny-llama" and over["budget_s"] == 0.1 and over["over"] and over["seconds"] >= 0.3
    within = report["test_within_budget"]["ready"][0]
    assert within["budget_s"] == 300 and not within["over"] and within["profile"] == "cpu"
    assert [(b["measured"], b["ok"]) for b in report["test_baseline_holds"]["baselines"]] == [(0.71, True)]
    assert [(b["measured"], b["ok"]) for b in report["test_baseline_moved"]["baselines"]] == [(0.61, False)]
    assert [m["name"] for m in report["test_baseline_holds"]["models"]] == ["tiny-llama", "tiny-sts"]
    assert "; 1 over their ready-time budget" in out
