"""One version everywhere: pyproject.toml's, `catalog.__version__` (what the warm index keys on and `catalog --version`
prints) and the newest version in CHANGELOG.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import catalog
from catalog_app.main import run

ROOT = Path(__file__).resolve().parents[2]
HEADING = re.compile(r"^## \[(?P<version>\d+\.\d+\.\d+)\] - (?P<date>\d{4}-\d{2}-\d{2})$", re.M)


def pyproject_version() -> str:
    """The [project] table's `version`, read by line (tomllib is not in Python 3.10, which the package supports)."""
    text = (ROOT / "pyproject.toml").read_text()
    table = text.split("\n[project]\n", 1)[1].split("\n[", 1)[0]
    found = re.findall(r'^version = "([^"]+)"$', table, re.M)
    assert len(found) == 1, "pyproject.toml's [project] table declares no single version"
    return found[0]


def changelog_versions() -> list[tuple[str, str]]:
    return [(m["version"], m["date"]) for m in HEADING.finditer((ROOT / "CHANGELOG.md").read_text())]


def test_pyproject_and_the_package_say_one_version() -> None:
    assert pyproject_version() == catalog.__version__


def test_catalog_version_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--version"]) == 0
    assert capsys.readouterr().out == f"catalog, version {catalog.__version__}\n"


def test_the_changelog_starts_with_it_and_goes_back_in_order() -> None:
    versions = changelog_versions()
    assert versions, "CHANGELOG.md has no '## [X.Y.Z] - YYYY-MM-DD' heading"
    assert versions[0][0] == catalog.__version__
    numbers = [tuple(int(n) for n in v.split(".")) for v, _ in versions]
    assert numbers == sorted(numbers, reverse=True) and len(set(numbers)) == len(numbers)
    dates = [d for _, d in versions]
    assert dates == sorted(dates, reverse=True)


def test_every_version_heading_has_its_form() -> None:
    """A heading that almost matches (a missing date, `Round N`) would drop a version from the checks above."""
    text = (ROOT / "CHANGELOG.md").read_text()
    level_two = re.findall(r"^## .*$", text, re.M)
    assert level_two and all(HEADING.fullmatch(line) for line in level_two), [
        line for line in level_two if not HEADING.fullmatch(line)
    ]
