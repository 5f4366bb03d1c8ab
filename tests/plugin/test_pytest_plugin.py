"""The pytest plugin as a user meets it: a separate `pytest` run (the plugin loads through its pytest11 entry
point) over a test file that asks for models by logical name, against a real folder store and cache."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import manifest_text

from catalog.errors import UsageError
from catalog.lookup import Catalog
from catalog.settings import Settings
from catalog_app.pytest_plugin import Machine, detect_machine, match_gpu_class, skip_reason
from resolver.stores import open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def user_env(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> dict[str, str]:
    """The bundled catalog plus two models bigger than an l4 runner, a filled folder store, an empty cache."""
    manifests = tmp_path / "manifests"
    shutil.copytree(ROOT / "manifests", manifests)
    for name, gpu in (("big-h200", "{class: h200}"), ("pair-l4", "{class: l4, count: 2}")):
        text = manifest_text(name, prefix=f"s3://vllm-ci-model-weights/org/{name}/").replace(
            "gpu: {class: cpu}", f"gpu: {gpu}"
        )
        (manifests / f"{name}.yaml").write_text(text)
    store = tmp_path / "store"
    for name in ("tiny-llama", "tiny-qwen2"):
        upload_from_dir(bundled, name, sources[name], open_store(str(store)))
    return {
        **os.environ,
        "CATALOG_DIR": str(manifests),
        "CATALOG_STORE": str(store),
        "CATALOG_CACHE": str(tmp_path / "cache"),
        "CATALOG_GPU_CLASS": "l4",
        "CATALOG_MODE": "ci",
    }


def run_pytest(tmp_path: Path, source: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "user-project"
    project.mkdir(exist_ok=True)
    (project / "test_models.py").write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", *args, "test_models.py"],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def counts(output: str) -> dict[str, int]:
    summary = output.strip().splitlines()[-1]
    return {
        word.rstrip("s") if word.startswith("error") else word: int(n)
        for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", summary)
    }


USER_TESTS = """\
import hashlib, os
from pathlib import Path

import pytest

import catalog
from catalog_app.pytest_plugin import RESOLUTIONS


@pytest.mark.catalog_model("tiny-llama")
def test_marked_gets_a_verified_folder(catalog_resolution, request):
    assert catalog_resolution.name == "tiny-llama" and request.node.stash[RESOLUTIONS]["tiny-llama"] is catalog_resolution
    manifest = catalog.load().get("tiny-llama")
    for entry in manifest.files:
        assert hashlib.sha256((catalog_resolution.path / entry.path).read_bytes()).hexdigest() == entry.sha256


def test_factory_resolves_by_name(catalog_model):
    qwen = catalog_model("tiny-qwen2")
    assert qwen.streamed and qwen.weights_uri.startswith(os.path.realpath(os.environ["CATALOG_STORE"]))
    assert catalog_model("tiny-llama", layout="hf-cache").hub_cache is not None


@pytest.mark.catalog_model("big-h200")
def test_needs_an_h200():
    raise AssertionError("must be skipped before anything is resolved")


@pytest.mark.catalog_model("pair-l4")
def test_needs_two_l4():
    raise AssertionError("must be skipped")


@pytest.mark.catalog_model("tiny-lama")
def test_typo():
    pass


def test_unmarked(catalog_resolution):
    pass


@pytest.mark.catalog_model("tiny-llama", layout="flat")
def test_bad_option():
    pass
"""


def test_marked_tests_resolve_skip_and_fail_by_logical_name(user_env: dict[str, str], tmp_path: Path) -> None:
    done = run_pytest(tmp_path, USER_TESTS, user_env)
    out = done.stdout
    assert counts(out) == {"passed": 2, "skipped": 2, "error": 3}, out  # errors: they fail at setup
    assert re.search(
        r"SKIPPED \[1\] test_models.py:\d+: big-h200 needs 1 x h200 \(141 GiB\); this machine is 1 x l4 \(24 GiB\)\n",
        out,
    )
    assert re.search(
        r"SKIPPED \[1\] test_models.py:\d+: pair-l4 needs 2 x l4 \(24 GiB\); this machine is 1 x l4 \(24 GiB\)\n", out
    )
    # User errors are one line with the hint, not a traceback through the resolver.
    assert (
        "catalog_model('tiny-lama'): no model named 'tiny-lama' in the catalog (hint: did you mean tiny-llama," in out
    )
    assert "the catalog_resolution fixture needs @pytest.mark.catalog_model(NAME) on the test" in out
    assert "catalog_model('tiny-llama'): layout='flat' is not one of dir, hf-cache" in out
    assert "resolver/" not in out and "Traceback" not in out and "another exception" not in out


PREFETCHED = """\
import pytest


@pytest.mark.catalog_model("tiny-llama")
def test_llama(catalog_resolution):
    assert catalog_resolution.source == "cache"  # fetched before the first test, not now


@pytest.mark.catalog_model("tiny-qwen2", layout="hf-cache")
def test_qwen(catalog_resolution):
    assert catalog_resolution.source == "cache" and catalog_resolution.hub_cache is not None


@pytest.mark.catalog_model("big-h200")
def test_big():
    pass


@pytest.mark.catalog_model("tiny-lama")
def test_typo():
    pass
"""


def test_prefetch_resolves_every_marked_model_before_the_tests(user_env: dict[str, str], tmp_path: Path) -> None:
    done = run_pytest(tmp_path, PREFETCHED, user_env, "--catalog-prefetch")
    assert counts(done.stdout) == {"passed": 2, "skipped": 1, "error": 1}, done.stdout + done.stderr
    # Two models: the skipped test's model is never fetched (it is not even in the store), and a typo in
    # one marker fails that test only.
    assert re.search(r"catalog: prefetched 2 model\(s\) in [\d.]+s\n", done.stdout), done.stdout


def test_without_prefetch_the_first_test_fetches(user_env: dict[str, str], tmp_path: Path) -> None:
    done = run_pytest(tmp_path, PREFETCHED, user_env)
    assert counts(done.stdout) == {"failed": 2, "skipped": 1, "error": 1}, done.stdout  # the tests fetched their models
    # The two failures are exactly the ones meant: each model came from the store during its own test.
    for test in ("test_llama", "test_qwen"):
        failure = done.stdout.split(f"_ {test} _", 1)[1].split("\n_", 1)[0]
        assert '>       assert catalog_resolution.source == "cache"' in failure, failure
    assert "prefetched" not in done.stdout


def test_importing_the_plugin_imports_no_heavy_library() -> None:
    code = (
        "import sys, catalog_app.pytest_plugin\n"
        "print(sorted(m for m in ('boto3', 'botocore', 'torch', 'huggingface_hub', 'resolver') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("device", "memory", "expected"),
    [
        ("NVIDIA H200", 140.4, "h200"),  # reports less than the catalog's 141: still an h200
        ("NVIDIA H200 MIG 1g.18gb", 16.5, "h200_18gb"),
        ("NVIDIA H200 MIG 2g.35gb", 32.5, "h200_35gb"),
        ("NVIDIA L4", 22.0, "l4"),
        ("NVIDIA L40S", 44.4, None),  # not an l4
        ("NVIDIA H100 80GB HBM3", 79.1, "h100"),
        ("NVIDIA A100-SXM4-80GB", 79.2, "a100"),
        ("NVIDIA GH200 480GB", 94.5, "gh200"),
        ("AMD Instinct MI300X", 191.5, "mi300"),
        ("NVIDIA B200", 178.4, "b200"),
    ],
)
def test_device_names_map_to_catalog_classes(
    bundled: Catalog, device: str, memory: float, expected: str | None
) -> None:
    assert match_gpu_class(device, memory, bundled.settings.gpu_classes) == expected


def test_machine_detection_order(bundled: Catalog) -> None:
    settings = bundled.settings
    h200s = lambda: ("NVIDIA H200", 8, 140.4)  # noqa: E731 - what probe_cuda returns on an 8-GPU H200 node
    none = Settings.build({})
    assert detect_machine(settings, none, h200s) == Machine("h200", 8, 141)
    assert detect_machine(settings, none, lambda: ("NVIDIA L40S", 2, 44.39)) == Machine("NVIDIA L40S", 2, 44.4)
    assert detect_machine(settings, none, lambda: None) == Machine("cpu", 1, 16)
    # A declaration wins over what torch sees; its case does not matter.
    declared = Settings.build({"CATALOG_GPU_CLASS": "L4", "CATALOG_GPU_COUNT": "4"})
    assert detect_machine(settings, declared, h200s) == Machine("l4", 4, 24)
    with pytest.raises(UsageError, match="CATALOG_GPU_CLASS='l40s' is not a GPU class"):
        detect_machine(settings, Settings.build({"CATALOG_GPU_CLASS": "l40s"}))
    with pytest.raises(UsageError, match="CATALOG_GPU_COUNT='0'"):
        Settings.build({"CATALOG_GPU_CLASS": "l4", "CATALOG_GPU_COUNT": "0"})


def test_skip_reasons(bundled: Catalog) -> None:
    def never() -> Machine:
        raise AssertionError("a cpu model must not need the machine")

    # cpu models run anywhere, whatever their count: no detection (no torch import) for them.
    assert skip_reason(bundled, bundled.get("tiny-llama-sharded"), never) is None
    minilm = bundled.get("all-minilm-l6-v2")  # l4 x 1
    assert skip_reason(bundled, minilm, lambda: Machine("cpu", 1, 16)) == (
        "all-minilm-l6-v2 needs 1 x l4 (24 GiB); this machine is 1 x cpu (16 GiB)"
    )
    assert skip_reason(bundled, minilm, lambda: Machine("h200_35gb", 1, 35)) is None  # more memory than it needs
    assert skip_reason(bundled, minilm, lambda: Machine("h200_18gb", 1, 18)) is not None
