"""Collisions a changed manifest can cause, checked the way CI and pre-commit check them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import manifest_text, write_catalog

from catalog.history import pin_changes
from catalog.loading import load_dir
from catalog.schema import ModelManifest

ROOT = Path(__file__).resolve().parents[2]
NEW_REV = "fedcba9876543210fedcba9876543210fedcba98"


def validate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "catalog", "validate", *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.parametrize("copy", ["aa-copy", "zz-copy"])
def test_pre_commit_call_on_a_copy_reusing_a_bundled_prefix_exits_1_with_file_and_line(
    tmp_path: Path, copy: str
) -> None:
    shutil.copytree(ROOT / "manifests", tmp_path / "manifests")
    qwen = (tmp_path / "manifests" / "tiny-qwen2.yaml").read_text()
    (tmp_path / "manifests" / f"{copy}.yaml").write_text(qwen.replace("name: tiny-qwen2", f"name: {copy}"))
    tables = (tmp_path / "manifests" / "tiny-qwen2.tensors.json").read_text()  # its pinned tensor tables, copied too
    (tmp_path / "manifests" / f"{copy}.tensors.json").write_text(
        tables.replace('"model": "tiny-qwen2"', f'"model": "{copy}"')
    )
    done = validate(tmp_path, f"manifests/{copy}.yaml")
    assert done.returncode == 1, done.stdout + done.stderr
    prefix = yaml.safe_load(qwen)["s3_prefix"]
    assert (
        f"manifests/{copy}.yaml:7: s3_prefix: {prefix!r} is the same prefix as 'tiny-qwen2' (manifests/tiny-qwen2.yaml:7); "
        "give each model its own prefix  [prefix-overlap]"
    ) in done.stdout.splitlines()
    # The copy pins tiny-qwen2's repo too, and neither is marked primary.
    assert [line.rsplit("[", 1)[-1] for line in done.stdout.splitlines()] == ["primary]", "prefix-overlap]"]
    assert validate(tmp_path, "manifests/tiny-llama.yaml").returncode == 0  # an uninvolved file stays clean


def test_pre_commit_call_on_an_umbrella_prefix_exits_1(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "manifests", tmp_path / "manifests")
    qwen = (tmp_path / "manifests" / "tiny-qwen2.yaml").read_text()
    prefix = yaml.safe_load(qwen)["s3_prefix"]
    umbrella = qwen.replace("name: tiny-qwen2", "name: aa-umbrella").replace(
        prefix, "s3://vllm-ci-model-weights/model-catalog/"
    )
    (tmp_path / "manifests" / "aa-umbrella.yaml").write_text(umbrella)
    done = validate(tmp_path, "manifests/aa-umbrella.yaml")
    assert done.returncode == 1
    out = [line for line in done.stdout.splitlines() if line.endswith("[prefix-overlap]")]
    assert len(out) == 2 and all(line.startswith("manifests/aa-umbrella.yaml:7: s3_prefix: ") for line in out)
    assert "prefix of 'tiny-llama' (manifests/tiny-llama.yaml:7)" in out[0]
    assert "prefix of 'tiny-qwen2' (manifests/tiny-qwen2.yaml:7)" in out[1]


def _base(text: str) -> ModelManifest:
    return ModelManifest.model_validate(yaml.safe_load(text))


def test_base_refuses_a_revision_bump_that_keeps_the_old_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    old = manifest_text("a")
    bumped = old.replace("0123456789abcdef0123456789abcdef01234567", NEW_REV).replace("b" * 64, "c" * 64)
    moved = bumped.replace("s3://ci-bucket/org/a/", f"s3://ci-bucket/org/a/{NEW_REV}/")  # new pin, own prefix: fine
    docs = load_dir(write_catalog(tmp_path, {"a.yaml": bumped})).docs
    found = pin_changes({"a": _base(old)}, docs)
    assert [(p.path, p.line, p.field, p.rule) for p in found] == [
        ("manifests/a.yaml", 5, "s3_prefix", "prefix-overlap")
    ]
    assert "keeps the prefix 's3://ci-bucket/org/a/' of the old pin org/a@0123456789ab" in found[0].message
    assert "overwrite" in found[0].message
    # Inside the old prefix is no better: listing the old pin's prefix returns the new pin's objects.
    assert [
        p.rule for p in pin_changes({"a": _base(old)}, load_dir(write_catalog(tmp_path, {"a.yaml": moved})).docs)
    ] == ["prefix-overlap"]
    elsewhere = moved.replace(f"s3://ci-bucket/org/a/{NEW_REV}/", f"s3://ci-bucket/org/a-{NEW_REV[:12]}/")
    assert pin_changes({"a": _base(old)}, load_dir(write_catalog(tmp_path, {"a.yaml": elsewhere})).docs) == []
    assert pin_changes({"a": _base(old)}, load_dir(write_catalog(tmp_path, {"a.yaml": old})).docs) == []  # unchanged


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True
    )


def test_validate_base_reports_the_kept_prefix_at_its_line(tmp_path: Path) -> None:
    old = manifest_text("a", prefix="s3://ci-bucket/org/a/0123456789ab/")
    write_catalog(tmp_path, {"a.yaml": old})
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "base")
    (tmp_path / "manifests" / "a.yaml").write_text(old.replace("0123456789abcdef0123456789abcdef01234567", NEW_REV))
    done = validate(tmp_path, "--base", "HEAD")
    assert done.returncode == 1
    assert len(done.stdout.splitlines()) == 1
    assert done.stdout.startswith("manifests/a.yaml:5: s3_prefix: the new pin org/a@fedcba987654 keeps the prefix")
    assert done.stdout.rstrip().endswith("[prefix-overlap]")
