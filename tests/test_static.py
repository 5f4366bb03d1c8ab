"""Types are part of the design (mypy --strict on catalog/ and resolver/): keep them checked with the tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_strict_passes_on_catalog_and_resolver() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_test_modules_have_unique_basenames() -> None:
    # The test folders are not packages, so pytest imports each test file under its basename: two files of one name
    # in different tiers fail collection ("import file mismatch") on a clean checkout.
    by_name: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        by_name.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}
