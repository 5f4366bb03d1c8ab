"""The catalog CLI as a user runs it: a subprocess, exit codes, stdout vs stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from helpers import manifest_text, write_catalog

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "manifests"


def run(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "catalog", *args], cwd=cwd, capture_output=True, text=True, env=env)


def test_bundled_catalog_is_valid() -> None:
    done = run("validate")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith(
        f"ok: {len(list(BUNDLED.glob('*.yaml'))) - 1} manifests valid"
    )  # all but catalog.yaml


def _pydantic_plugin_leaving_a_mark(root: Path, mark: Path) -> Path:
    """A folder holding a pydantic plugin as pip installs one (an entry point in the group `pydantic`), which writes
    `mark` when pydantic loads it. Returns the folder, to put on PYTHONPATH."""
    site = root / "site"
    info = site / "markplugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: markplugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nmark = markplugin:plugin\n")
    (site / "markplugin.py").write_text(
        f"import pathlib\npathlib.Path({str(mark)!r}).write_text('loaded')\n\n"
        "class Plugin:\n    def new_schema_validator(self, *args, **kwargs):\n        return None, None, None\n\n"
        "plugin = Plugin()\n"
    )
    return site


def test_the_cli_loads_no_pydantic_plugin_unless_the_user_set_the_switch(tmp_path: Path) -> None:
    """pydantic scans every installed distribution for plugins when it builds its first model (50-90 ms of a cold
    start-up); the CLI uses none and turns the scan off, but keeps a PYDANTIC_DISABLE_PLUGINS the user set."""
    mark = tmp_path / "plugin-loaded"
    site = _pydantic_plugin_leaving_a_mark(tmp_path, mark)
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    done = run("validate", env=env)
    assert done.returncode == 0, done.stderr
    assert not mark.exists()
    done = run("validate", env={**env, "PYDANTIC_DISABLE_PLUGINS": ""})  # the user's own value: plugins load
    assert done.returncode == 0, done.stderr
    assert mark.read_text() == "loaded"


def test_validate_reports_every_problem_then_exits_1(tmp_path: Path) -> None:
    write_catalog(tmp_path, {"a.yaml": manifest_text("a", revision="main"), "b.yaml": "name: [b\n"})
    done = run("validate", cwd=tmp_path)
    assert done.returncode == 1
    out = done.stdout.splitlines()
    assert out[0].startswith("manifests/a.yaml:4: source.revision: revision 'main' is not pinned")
    assert out[1].startswith("manifests/b.yaml:2: invalid YAML")
    assert "Traceback" not in done.stderr
    assert "2 problems in 2 files" in done.stderr


def test_validate_json_and_github_formats(tmp_path: Path) -> None:
    write_catalog(tmp_path, {"a.yaml": manifest_text("a", prefix="s3://ci-bucket/a")})
    as_json = json.loads(run("validate", "--format", "json", cwd=tmp_path).stdout)
    assert as_json["ok"] is False
    [problem] = as_json["problems"]
    assert {k: problem[k] for k in ("path", "line", "field", "rule")} == {
        "path": "manifests/a.yaml",
        "line": 5,
        "field": "s3_prefix",
        "rule": "s3-prefix",
    }
    assert "exactly one '/'" in problem["message"]
    github = run("validate", "--format", "github", cwd=tmp_path).stdout.strip()
    assert github.startswith("::error file=manifests/a.yaml,line=5,title=s3-prefix::s3_prefix: ")


def test_validate_named_files_reports_only_them_but_checks_collisions(tmp_path: Path) -> None:
    write_catalog(
        tmp_path,
        {
            "a.yaml": manifest_text("a", prefix="s3://ci-bucket/shared/"),
            "b.yaml": manifest_text("b", prefix="s3://ci-bucket/shared/b/", revision="main"),
            "c.yaml": manifest_text("c", revision="dev"),
        },
    )
    done = run("validate", "manifests/b.yaml", cwd=tmp_path)
    assert done.returncode == 1
    rules = [line.rsplit("[", 1)[1] for line in done.stdout.splitlines()]
    assert rules == ["revision-unpinned]", "prefix-overlap]"]  # c's problem is not reported


def test_list_filters_and_json() -> None:
    done = run("list", "--load-format", "runai_streamer", "--format", "json")
    assert done.returncode == 0
    assert [m["name"] for m in json.loads(done.stdout)] == ["tiny-qwen2"]
    text = run("list", "--gpu", "l4").stdout.splitlines()
    assert text[0].split() == ["NAME", "FORMAT", "GPU", "SIZE", "SOURCE"]
    assert [line.split()[0] for line in text[1:]] == ["all-minilm-l6-v2"]
    assert [m["name"] for m in json.loads(run("list", "--tag", "embedding", "--format", "json").stdout)] == [
        "all-minilm-l6-v2"
    ]


def test_list_with_an_unknown_gpu_class_is_a_usage_error() -> None:
    done = run("list", "--gpu", "tpu")
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == "error: unknown GPU class 'tpu'"


def test_show_prints_the_manifest_and_suggests_close_names() -> None:
    done = run("show", "tiny-llama", "--format", "json")
    assert done.returncode == 0
    data = json.loads(done.stdout)
    assert data["name"] == "tiny-llama" and data["gpu"] == {"class": "cpu", "count": 1}
    assert yaml.safe_load(run("show", "tiny-llama").stdout)["source"] == data["source"]
    missing = run("show", "tiny-lama")
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == [
        "error: no model named 'tiny-lama' in the catalog",
        "hint: did you mean tiny-llama, tiny-llama-sharded, tiny-llama-tensorizer?",
    ]


def test_schema_validates_the_bundled_manifests() -> None:
    schema = json.loads(run("schema").stdout)
    for path in BUNDLED.glob("*.yaml"):
        if path.name != "catalog.yaml":
            jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "x", "surprise": 1}, schema)


def test_catalog_dir_from_flag_and_env(tmp_path: Path) -> None:
    assert run("--catalog", str(BUNDLED), "list", cwd=tmp_path).returncode == 0
    env = {"CATALOG_DIR": str(BUNDLED), "PATH": "/usr/bin:/bin"}
    assert "tiny-llama" in run("list", cwd=tmp_path, env=env).stdout
    nowhere = run("list", cwd=tmp_path)
    assert nowhere.returncode == 2 and nowhere.stderr.startswith("error: no manifests/catalog.yaml found")


def test_usage_errors_exit_2() -> None:
    assert run("validate", "--format", "xml").returncode == 2
    assert run("nope").returncode == 2
    assert run("--version").stdout.startswith("catalog, version ")


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True
    )


def test_validate_base_refuses_hash_changes_at_the_same_revision(tmp_path: Path) -> None:
    write_catalog(tmp_path, {"a.yaml": manifest_text("a"), "b.yaml": manifest_text("b")})
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "base")
    a = tmp_path / "manifests" / "a.yaml"
    a.write_text(a.read_text().replace("b" * 64, "c" * 64))  # same revision, new hash: forbidden
    b = tmp_path / "manifests" / "b.yaml"
    b.write_text(
        b.read_text()
        .replace("0123456789abcdef", "fedcba9876543210")
        .replace("b" * 64, "d" * 64)
        .replace("s3://ci-bucket/org/b/", "s3://ci-bucket/org/b-fedcba987654/")
    )  # new pin, own prefix
    done = run("validate", "--base", "HEAD", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "manifests/a.yaml:14: files[1].sha256: 'model.safetensors' changed at the same revision 0123456789ab "
        f"(was sha256 {'b' * 64}, 1000 bytes); pins are immutable: pin a new revision instead  [pin-changed]"
    ]
    assert run("validate", "--base", "no-such-ref", cwd=tmp_path).returncode == 2


def test_pre_commit_hook_definition_runs_validate() -> None:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hooks[0]["id"] == "catalog-validate" and hooks[0]["entry"] == "catalog validate"


def test_importing_catalog_and_validating_imports_no_heavy_library() -> None:
    code = (
        "import sys, catalog, catalog_app.main\n"
        "code = catalog_app.main.run(['--catalog', sys.argv[1], 'validate'])\nassert code == 0, code\n"
        "heavy = sorted(m for m in ('boto3', 'botocore', 'huggingface_hub', 'torch', 'tensorizer', 'runai_model_streamer')\n"
        "               if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(BUNDLED)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


@pytest.mark.parametrize("text", ["name: [", "{{{{", "\t- x", "name: !!binary aGk=", "files: 3", "\x00"])
def test_malformed_manifests_never_produce_a_traceback(tmp_path: Path, text: str) -> None:
    folder = write_catalog(tmp_path, {})
    (folder / "x.yaml").write_text(text)
    done = run("validate", cwd=tmp_path)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr + done.stdout
    assert done.stdout.startswith("manifests/x.yaml:")


def test_matrix_groups_models_by_gpu_class() -> None:
    table = json.loads(run("matrix").stdout)
    assert list(table) == ["cpu", "l4"]
    assert [m["name"] for m in table["l4"]] == ["all-minilm-l6-v2"]
    sharded = next(m for m in table["cpu"] if m["name"] == "tiny-llama-sharded")
    assert sharded["gpu_count"] == 2 and sharded["load_format"] == "runai_streamer_sharded"
    steps = yaml.safe_load(run("matrix", "--gpu", "cpu", "--format", "buildkite").stdout)["steps"]
    assert steps[0]["key"] == "catalog-prewarm-cpu" and steps[0]["agents"] == {"queue": "cpu"}  # then a job per model
    assert (
        steps[0]["command"]
        == "catalog resolve tiny-llama tiny-llama-sharded tiny-llama-tensorizer tiny-qwen2 tiny-sts --format json"
    )
    assert run("matrix", "--gpu", "tpu").returncode == 2


def test_a_deleted_working_directory_is_one_line_or_does_not_matter(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    code = (
        "import os, sys\nos.chdir(sys.argv[1])\nos.rmdir(sys.argv[1])\n"
        "from catalog_app.main import run\nsys.exit(run(sys.argv[2:]))\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", code, str(gone), "resolve", "tiny-llama"], capture_output=True, text=True
    )
    assert found.returncode == 2 and found.stderr.startswith("error: the working directory no longer exists"), (
        found.stderr
    )
    gone.mkdir()
    named = subprocess.run(
        [sys.executable, "-c", code, str(gone), "--catalog", str(BUNDLED), "validate"], capture_output=True, text=True
    )
    assert named.returncode == 0 and "Traceback" not in named.stderr, (
        named.stderr
    )  # with --catalog, the cwd does not matter
