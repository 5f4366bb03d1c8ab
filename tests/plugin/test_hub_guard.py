"""The Hub guard as a CI job meets it: a separate `pytest` run with CATALOG_MODE=ci, HF_ENDPOINT set to a Hub double
that serves every bundled repo and counts every request (what would leave the machine), and test files that ask for
models through huggingface_hub, transformers, datasets and a child process. The guard refuses each request before it
leaves, names the test, the repo, the revision, the file and the manifest line that would fix it; a warm runner
asks nothing at all. The request parser and the verdicts are checked directly too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hubdouble import HubDouble

from catalog import yamlsource
from catalog.lookup import Catalog
from catalog_app.hub_guard import HubAsk, judge, parse_request
from resolver.cache import Cache
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import open_store
from resolver.upload import upload_from_dir
from resolver.views import Layout

ROOT = Path(__file__).resolve().parents[2]
LLAMA_REV = "a012419b4c2ea875f8c08a9b50e83dadfe538766"
MINILM_REV = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"


def line_of(name: str, loc: yamlsource.Loc) -> str:
    """`manifests/NAME.yaml:LINE` of a key of a bundled manifest."""
    path = ROOT / "manifests" / f"{name}.yaml"
    return f"manifests/{name}.yaml:{yamlsource.parse(path.read_text()).lines.line_of(loc)}"


@pytest.mark.parametrize(
    ("method", "target", "expected"),
    [
        (
            "HEAD",
            "/org/name/resolve/main/config.json",
            HubAsk("HEAD", "", "file", "model", "org/name", "main", "config.json"),
        ),
        (
            "GET",
            "/gpt2/resolve/" + "a" * 40 + "/sub/dir/w.safetensors",
            HubAsk("GET", "", "file", "model", "gpt2", "a" * 40, "sub/dir/w.safetensors"),
        ),
        (
            "HEAD",
            "/datasets/org/data/resolve/refs%2Fpr%2F1/data/train.jsonl",
            HubAsk("HEAD", "", "file", "dataset", "org/data", "refs/pr/1", "data/train.jsonl"),
        ),
        (
            "GET",
            "/api/models/org/name/tree/main/onnx?recursive=true",
            HubAsk("GET", "", "metadata", "model", "org/name", "main"),
        ),
        ("GET", "/api/datasets/org/data/revision/abc", HubAsk("GET", "", "metadata", "dataset", "org/data", "abc")),
        ("GET", "/api/models/org/name", HubAsk("GET", "", "metadata", "model", "org/name", None)),
        ("POST", "/api/models/org/name/paths-info/main", HubAsk("POST", "", "metadata", "model", "org/name", "main")),
        ("GET", "/api/whoami-v2", HubAsk("GET", "", "other")),
    ],
)
def test_requests_are_read_as_the_hub_reads_them(method: str, target: str, expected: HubAsk) -> None:
    ask = parse_request(method, target)
    assert (ask.kind, ask.repo_type, ask.repo, ask.revision, ask.file) == (
        expected.kind,
        expected.repo_type,
        expected.repo,
        expected.revision,
        expected.file,
    )


def test_each_verdict_names_what_would_fix_it(bundled: Catalog) -> None:
    def where(name: str, loc: yamlsource.Loc) -> str:
        return line_of(name, loc)

    def verdict(target: str, method: str = "HEAD") -> str:
        return judge(parse_request(method, target), bundled, where).message

    assert (
        verdict("/someorg/unpinned/resolve/main/config.json")
        == "no manifest pins someorg/unpinned: `catalog add someorg/unpinned`"
    )
    tokenizer = bundled.get("tiny-llama").files.index(bundled.get("tiny-llama").file("tokenizer.json"))  # type: ignore[arg-type]
    assert verdict(f"/model-catalog/tiny-llama/resolve/{LLAMA_REV}/tokenizer.json").startswith(
        f"tokenizer.json is pinned at {line_of('tiny-llama', ('files', tokenizer, 'path'))} (tiny-llama, "
        "model-catalog/tiny-llama@a012419b4c2e) but was asked of the Hub: this runner's HF cache lacks it"
    )
    assert verdict(f"/sentence-transformers/all-MiniLM-L6-v2/resolve/{MINILM_REV}/onnx/model.onnx").startswith(
        f"{line_of('all-minilm-l6-v2', ('source', 'exclude'))} pins sentence-transformers/all-MiniLM-L6-v2@c9745ed1d9f2 "
        "(all-minilm-l6-v2) but not onnx/model.onnx (source.exclude 'onnx/' drops it)"
    )
    assert f"{line_of('all-minilm-l6-v2', ('source', 'include'))} pins" in verdict(
        f"/sentence-transformers/all-MiniLM-L6-v2/resolve/{MINILM_REV}/pytorch_model.bin"
    )
    # A file the selection would take but the pin does not list is not in the repo: an optional file probed for.
    assert "is not a file of model-catalog/tiny-llama@a012419b4c2e" in verdict(
        f"/model-catalog/tiny-llama/resolve/{LLAMA_REV}/added_tokens.json"
    )
    assert verdict("/model-catalog/tiny-llama/resolve/" + "b" * 40 + "/config.json").startswith(
        f"model-catalog/tiny-llama@{'b' * 40} is not a pinned revision: {line_of('tiny-llama', ('source', 'revision'))}"
    )
    assert "a library asked the Hub for it (HF_HUB_OFFLINE is unset)" in verdict(
        "/api/models/model-catalog/tiny-llama", "GET"
    )
    assert verdict("/api/datasets/model-catalog/tiny-sts/revision/main", "GET").startswith(
        f"metadata of model-catalog/tiny-sts@main is pinned by {line_of('tiny-sts', ('source', 'hf_repo'))}"
    )
    assert judge(parse_request("GET", "/api/whoami-v2"), bundled, where).message.startswith(
        "not a request about a repo"
    )


@pytest.fixture
def runner(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> dict[str, Path]:
    """A CI runner: the bundled catalog in a project, a folder store, and an HF cache laid out by the catalog (the
    `--layout hf-cache` snapshots of tiny-llama and tiny-sts), plus a copy of it missing tiny-llama's tokenizer.json."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "manifests", project / "manifests")
    store = open_store(str(tmp_path / "store"))
    for name in ("tiny-llama", "tiny-sts"):
        upload_from_dir(bundled, name, sources[name], store)
    cache = Cache(tmp_path / "cache")
    for name in ("tiny-llama", "tiny-sts"):
        resolve(bundled, name, cache=cache, store=store, options=ResolveOptions(layout=Layout.HF_CACHE))
    lacking = tmp_path / "runner-hf"
    shutil.copytree(cache.hub, lacking, symlinks=True)
    (lacking / "models--model-catalog--tiny-llama" / "snapshots" / LLAMA_REV / "tokenizer.json").unlink()
    return {"project": project, "store": tmp_path / "store", "cache": cache.root, "hf": cache.hub, "lacking": lacking}


def run_pytest(
    runner: dict[str, Path], hub: HubDouble, source: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    project = runner["project"]
    (project / "test_models.py").write_text(textwrap.dedent(source))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    base |= {
        "CATALOG_DIR": str(project / "manifests"),
        "CATALOG_STORE": str(runner["store"]),
        "CATALOG_CACHE": str(runner["cache"]),
        "CATALOG_MODE": "ci",
        "CATALOG_GPU_CLASS": "cpu",
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(project / "hf-home"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args, "test_models.py"],
        cwd=project,
        capture_output=True,
        text=True,
        env=base,
        timeout=600,
    )


def failure(output: str, test: str) -> str:
    """The failure section of `test` in pytest's output."""
    return output.split(f"_ {test} _", 1)[1].split("\n___", 1)[0].split("\n===", 1)[0]


ASKING = f"""\
import subprocess, sys

REV = "{LLAMA_REV}"


def test_unpinned_repo():
    from huggingface_hub import hf_hub_download
    hf_hub_download("someorg/unpinned", "config.json")


def test_removed_file_by_repo_id():
    from transformers import AutoTokenizer
    AutoTokenizer.from_pretrained("model-catalog/tiny-llama", revision=REV)


def test_unpinned_file():
    from huggingface_hub import hf_hub_download
    hf_hub_download("sentence-transformers/all-MiniLM-L6-v2", "pytorch_model.bin", revision="{MINILM_REV}")


def test_dataset_by_repo_id():
    import datasets
    datasets.load_dataset("model-catalog/tiny-sts")


def test_a_child_process_asks():
    code = "from huggingface_hub import hf_hub_download; hf_hub_download('other/x', 'a.json')"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cached_at_the_pin_asks_nothing():
    from transformers import AutoConfig
    assert AutoConfig.from_pretrained("model-catalog/tiny-llama", revision=REV).hidden_size == 128
"""


def test_the_guard_refuses_every_request_and_names_the_pin(
    runner: dict[str, Path], hub: HubDouble, bundled: Catalog
) -> None:
    done = run_pytest(runner, hub, ASKING, "--catalog-report", "report.json", HF_HUB_CACHE=str(runner["lacking"]))
    out = done.stdout
    assert done.returncode == 1 and out.strip().splitlines()[-1].startswith("5 failed, 1 passed"), out + done.stderr
    assert hub.hub_requests() == 0, hub.requests  # nothing left the machine
    # The file removed from the runner's cache, by test, repo, revision, file and manifest line, first.
    llama = bundled.get("tiny-llama")
    tokenizer = line_of("tiny-llama", ("files", [f.path for f in llama.files].index("tokenizer.json"), "path"))
    text = failure(out, "test_removed_file_by_repo_id")
    assert (
        f"catalog hub guard: HEAD model-catalog/tiny-llama@a012419b4c2e tokenizer.json: tokenizer.json is pinned at "
        f"{tokenizer} (tiny-llama, model-catalog/tiny-llama@a012419b4c2e) but was asked of the Hub: this runner's HF "
        "cache lacks it"
    ) in text
    assert (
        f"model-catalog/tiny-llama@a012419b4c2e: this runner's HF cache ({runner['lacking']}) lacks tokenizer.json ({tokenizer})"
        in text
    )
    assert "test_models.py::test_removed_file_by_repo_id asked the Hub" in text
    assert (
        "catalog hub guard: HEAD someorg/unpinned@main config.json: no manifest pins someorg/unpinned: "
        "`catalog add someorg/unpinned`"
    ) in failure(out, "test_unpinned_repo")
    assert (
        f"catalog hub guard: HEAD sentence-transformers/all-MiniLM-L6-v2@c9745ed1d9f2 pytorch_model.bin: "
        f"{line_of('all-minilm-l6-v2', ('source', 'include'))} pins sentence-transformers/all-MiniLM-L6-v2@c9745ed1d9f2 "
        "(all-minilm-l6-v2) but not pytorch_model.bin"
    ) in failure(out, "test_unpinned_file")
    assert f"is pinned at {line_of('tiny-sts', ('files', 0, 'path'))} (tiny-sts" in failure(
        out, "test_dataset_by_repo_id"
    )
    # The child process's request was refused too, against the test that started it.
    assert "test_models.py::test_a_child_process_asks asked the Hub 1 time(s)" in failure(
        out, "test_a_child_process_asks"
    )
    assert "no manifest pins other/x" in failure(out, "test_a_child_process_asks")
    # The library surfaced the guard's own words as well (huggingface_hub puts the 403's message in its error).
    assert (
        "403 Forbidden: model-catalog hub guard (test_models.py::test_a_child_process_asks): no manifest pins other/x"
        in out
    )
    report = json.loads((runner["project"] / "report.json").read_text())
    tests = {t["test"].split("::")[1]: t for t in report["tests"]}
    assert [m["name"] for m in tests["test_removed_file_by_repo_id"]["models"]] == ["tiny-llama"]
    assert (
        tests["test_cached_at_the_pin_asks_nothing"]["guarded"] == []
        and tests["test_cached_at_the_pin_asks_nothing"]["outcome"] == "passed"
    )
    assert {g["file"] for g in tests["test_removed_file_by_repo_id"]["guarded"]} >= {"tokenizer.json"}
    assert report["summary"]["guarded_requests"] == sum(len(t["guarded"]) for t in report["tests"]) > 0
    # Without the guard the same requests reach the Hub (here the double, which serves the file and counts).
    unguarded = run_pytest(
        runner, hub, ASKING, "--no-catalog-hub-guard", "-k", "removed_file", HF_HUB_CACHE=str(runner["lacking"])
    )
    assert unguarded.returncode == 0 and hub.hub_requests() > 0, unguarded.stdout


WARM = """\
import subprocess, sys

import pytest


def test_by_repo_id():
    from transformers import AutoModelForCausalLM, AutoTokenizer
    AutoTokenizer.from_pretrained("model-catalog/tiny-llama")
    AutoModelForCausalLM.from_pretrained("model-catalog/tiny-llama")


def test_a_dataset_by_repo_id():
    import datasets
    from huggingface_hub import snapshot_download
    assert datasets.load_dataset(snapshot_download("model-catalog/tiny-sts", repo_type="dataset"))["train"].num_rows > 0


@pytest.mark.catalog_model("tiny-llama")
def test_marked(catalog_resolution):
    assert catalog_resolution.name == "tiny-llama"


def test_a_child_process():
    code = "from huggingface_hub import hf_hub_download; hf_hub_download('model-catalog/tiny-llama', 'config.json')"
    subprocess.run([sys.executable, "-c", code], check=True)
"""


def test_a_warm_runner_asks_the_hub_nothing(runner: dict[str, Path], hub: HubDouble) -> None:
    """What `catalog resolve --layout hf-cache --format env` exports (HF_HUB_CACHE, HF_HUB_OFFLINE=1): nothing asks."""
    done = run_pytest(
        runner, hub, WARM, "--catalog-report", "report.json", HF_HUB_CACHE=str(runner["hf"]), HF_HUB_OFFLINE="1"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert hub.hub_requests() == 0
    report = json.loads((runner["project"] / "report.json").read_text())
    assert report["summary"]["guarded_requests"] == 0 and report["summary"]["hub_guard"].startswith("http://127.0.0.1:")
    models = {t["test"].split("::")[1]: [(m["name"], m["via"]) for m in t["models"]] for t in report["tests"]}
    assert models == {
        "test_by_repo_id": [("tiny-llama", "repo id")],
        "test_a_dataset_by_repo_id": [("tiny-sts", "repo id")],
        "test_marked": [("tiny-llama", "marker")],
        "test_a_child_process": [],
    }
    assert "catalog: 4 test(s) used 2 model(s); hub guard on: 0 Hub request(s) refused" in done.stdout
