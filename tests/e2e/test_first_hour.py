"""A newcomer's first hour: the demo, then every command it prints and every example of the README's first steps,
run as written (in bash, from a checkout-like folder: the manifests, the venv and the demo's .catalog/)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A folder laid out like a fresh clone after `python3 dev.py demo`, and what the demo printed."""
    root = tmp_path_factory.mktemp("checkout")
    shutil.copytree(ROOT / "manifests", root / "manifests")
    (root / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")} | {
        "CATALOG_DEMO_DIR": str(root / ".catalog")
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root, done.stdout


def bash(root: Path, script: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "VIRTUAL_ENV"))}
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if not p.startswith(sys.prefix))
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=900
    )


def first_steps() -> list[str]:
    """The README's First steps, its `sh` blocks."""
    section = (ROOT / "README.md").read_text().split("## First steps", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


def test_the_demo_fills_the_store_with_every_bundled_model_and_its_next_steps_work(checkout: tuple[Path, str]) -> None:
    root, printed = checkout
    lines = printed.split("Next, from the repository's root (README.md: First steps):", 1)[1].strip().splitlines()
    assert [line.strip() for line in lines] == first_steps()[
        0
    ].strip().splitlines()  # the README's lines, as they are there
    done = bash(root, "\n".join(line.strip() for line in lines))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "--served-model-name tiny-qwen2" in done.stdout
    assert "ok   tiny-llama-tensorizer" in done.stdout
    assert "No changes: the store matches the manifests." in done.stdout  # every bundled model is in the store


def test_every_example_of_the_readmes_first_steps_runs_as_written(checkout: tuple[Path, str]) -> None:
    root, _ = checkout
    blocks = first_steps()
    assert len(blocks) == 2
    bundled = sorted(p.name for p in (root / "manifests").iterdir())
    done = bash(root, "\n".join(blocks))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "--served-model-name my-llama" in done.stdout  # the first model of one's own, added offline and resolved
    # ... into a scratch catalog: the bundled set, which the suite checks, is left as it was.
    assert (root / ".catalog" / "my-catalog" / "my-llama.yaml").is_file()
    assert sorted(p.name for p in (root / "manifests").iterdir()) == bundled
