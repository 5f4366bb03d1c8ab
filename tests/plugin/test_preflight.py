"""`pytest --catalog-preflight` on a suite of 50 tests made here: it maps each test to its models (markers, a
logical name in the test's module, repo ids in parametrize values, the factory's argument), checks from stats that
the runner holds every pin, and fails before the first test runs naming test -> manifest:line -> missing files;
with every pin present it passes without a single request to the store (a counting HTTP store here);
`--catalog-prefetch` fetches what is missing instead. How tests are mapped is checked directly too."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from catalog import yamlsource
from catalog.lookup import Catalog
from catalog_app.model_refs import Names, Ref, code_strings, named_refs
from resolver.cache import Cache
from resolver.preflight import readiness
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import open_store
from resolver.upload import upload_from_dir
from resolver.views import Layout

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("tiny-llama", "tiny-qwen2", "tiny-sts")

SUITE = """\
from pathlib import Path

import pytest

DATA = "tiny-sts"  # a logical name in a module constant the tests name


def ran():
    with open(Path(__file__).parent / "ran.txt", "a") as f:
        f.write("x")


@pytest.mark.parametrize("i", range(20))
@pytest.mark.catalog_model("tiny-llama")
def test_marked(i, catalog_resolution):
    ran()


@pytest.mark.parametrize("i", range(10))
def test_factory(i, catalog_model):
    catalog_model("tiny-qwen2")
    ran()


@pytest.mark.parametrize("repo", ["model-catalog/tiny-llama"] * 10)
def test_by_repo_id(repo):
    ran()


@pytest.mark.parametrize("i", range(10))
def test_data(i):
    assert DATA
    ran()
"""


class CountingStore:
    """An HTTP store that answers nothing (404) and counts every request: the store of a runner that must not be read."""

    def __init__(self) -> None:
        self.requests = 0
        counter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                counter.requests += 1
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_HEAD = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def counting_store() -> Iterator[CountingStore]:
    store = CountingStore()
    yield store
    store.close()


@pytest.fixture
def runner(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> dict[str, Path]:
    """A project with the suite and the bundled catalog; a folder store with the three models; a cache holding every
    view the suite uses (tiny-llama in both layouts, tiny-qwen2's local files, tiny-sts)."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "manifests", project / "manifests")
    (project / "test_models.py").write_text(SUITE)
    store = open_store(str(tmp_path / "store"))
    cache = Cache(tmp_path / "cache")
    for name in MODELS:
        upload_from_dir(bundled, name, sources[name], store)
        resolve(bundled, name, cache=cache, store=store)
    resolve(bundled, "tiny-llama", cache=cache, store=store, options=ResolveOptions(layout=Layout.HF_CACHE))
    return {"project": project, "store": tmp_path / "store", "cache": cache.root}


def run_pytest(runner: dict[str, Path], *args: str, store: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    env |= {
        "CATALOG_DIR": str(runner["project"] / "manifests"),
        "CATALOG_STORE": store or str(runner["store"]),
        "CATALOG_CACHE": str(runner["cache"]),
        "CATALOG_GPU_CLASS": "cpu",
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args, "test_models.py"],
        cwd=runner["project"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def test_the_preflight_names_each_test_missing_a_pin_before_any_runs(
    runner: dict[str, Path], bundled: Catalog, counting_store: CountingStore
) -> None:
    sts = bundled.get("tiny-sts")
    index = [f.path for f in sts.files].index("data/test.jsonl")
    cache = Cache(runner["cache"])
    cache.blob_path(sts.files[index].sha256).unlink()  # one pin gone from the runner: its blob and its view's link
    next(p for p in (runner["cache"] / "models" / "tiny-sts").rglob("test.jsonl")).unlink()
    line = yamlsource.parse((ROOT / "manifests" / "tiny-sts.yaml").read_text()).lines.line_of(("files", index, "path"))
    done = run_pytest(runner, "--catalog-preflight", store=counting_store.url)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert re.search(
        r"catalog preflight: 10 of 50 test\(s\) need pins this runner lacks \(checked in [\d.]+ s, nothing "
        r"read from any store; `pytest --catalog-prefetch` fetches them\)",
        out,
    ), out
    for i in range(10):
        assert (
            f"  test_models.py::test_data[{i}] -> manifests/tiny-sts.yaml:{line} (tiny-sts, dir) -> missing "
            "data/test.jsonl\n"
        ) in out + "\n"
    assert "test_marked" not in out and "test_by_repo_id" not in out  # every other test's pins are here
    assert not (runner["project"] / "ran.txt").exists()  # not a single test ran
    assert counting_store.requests == 0
    # Under xdist a worker may not end the session: each test fails at setup with the same words, none runs.
    spread = run_pytest(runner, "--catalog-preflight", "-n", "2", store=counting_store.url)
    assert spread.returncode == 1 and "50 errors" in spread.stdout.splitlines()[-1], spread.stdout
    assert "catalog preflight: 10 of 50 test(s) need pins this runner lacks" in spread.stdout
    assert f"test_models.py::test_data[0] -> manifests/tiny-sts.yaml:{line} (tiny-sts, dir) -> missing" in spread.stdout
    assert not (runner["project"] / "ran.txt").exists() and counting_store.requests == 0
    # --catalog-prefetch fetches what is missing instead, and the suite runs.
    fetched = run_pytest(runner, "--catalog-preflight", "--catalog-prefetch")
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    assert re.search(r"catalog: prefetched 1 model\(s\) in [\d.]+s", fetched.stdout) and "50 passed" in fetched.stdout
    assert len((runner["project"] / "ran.txt").read_text()) == 50


def test_with_every_pin_present_the_preflight_reads_no_store(
    runner: dict[str, Path], counting_store: CountingStore
) -> None:
    done = run_pytest(runner, "--catalog-preflight", "--collect-only", store=counting_store.url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(
        r"catalog preflight: 50 test\(s\), 4 model view\(s\), every pin present in [\d.]+ s \(nothing read "
        r"from any store\)",
        done.stdout,
    ), done.stdout
    assert counting_store.requests == 0


PREFIX = "tiny-llama"


def _helper() -> str:
    return "tiny-sts"  # found: a function of the module the test calls by name


def _uses() -> None:
    print(_helper(), "Model-Catalog/Tiny-Qwen2")  # a repo id is matched as the Hub matches it, without case
    print(f"{PREFIX}-sharded")  # built at run time: not found (PREFIX itself names tiny-llama, and is found)


def test_tests_map_to_the_models_they_name(bundled: Catalog) -> None:
    names = Names.of(bundled)
    assert names.repos["model-catalog/tiny-llama"] == "tiny-llama"  # the primary of three manifests
    refs, unmapped = named_refs(code_strings(_uses), names)
    assert sorted(refs, key=lambda r: r.name) == [
        Ref("tiny-llama", "named", "tiny-llama"),
        Ref("tiny-qwen2", "repo id", "Model-Catalog/Tiny-Qwen2", "hf-cache"),
        Ref("tiny-sts", "named", "tiny-sts"),
    ]
    assert unmapped == []
    assert readiness(bundled, Cache(Path("/nonexistent")), (), "tiny-qwen2").missing  # an empty cache lacks it all


@pytest.mark.parametrize("layout", list(Layout))
@pytest.mark.parametrize("materialize", [False, True])
def test_the_preflight_needs_what_resolve_lays_out(bundled: Catalog, layout: Layout, materialize: bool) -> None:
    from resolver.preflight import needed
    from resolver.resolve import plan_files

    for m in bundled:
        plan = plan_files(m, materialize or layout is Layout.HF_CACHE)
        assert needed(m, layout, materialize) == (plan.local, len(plan.streamed)), m.name
