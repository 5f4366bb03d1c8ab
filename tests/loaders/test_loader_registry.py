"""The loader registry (one loader per FormatSpec.loader, formats without one skipped, not failed), the
environment a load runs in, and tensorizer's whole-file pin check. Folder stores only: no S3 server."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from helpers import SHA, files_yaml, manifest_text, write_catalog

import catalog
from catalog.errors import IntegrityError
from catalog.formats import FORMATS, LoadFormat
from catalog.lookup import Catalog
from catalog.settings import S3Options
from resolver.cache import Cache
from resolver.loaders import (
    LOADERS,
    LOCAL,
    LoadError,
    check_load,
    load_weights,
    loader_for,
    scoped_environ,
    stream_target,
)
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import LocalStore, S3Store, open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]
UNCHECKED = [fmt for fmt, spec in FORMATS.items() if spec.loader is None]


def test_every_loader_a_format_names_is_registered() -> None:
    named = {spec.loader for spec in FORMATS.values() if spec.loader is not None}
    assert named and named <= set(LOADERS), named - set(LOADERS)
    for name, loader in LOADERS.items():
        assert loader.NEEDS and "torch" in loader.NEEDS, name
        assert callable(loader.load), name


def test_gguf_and_pt_cannot_be_load_checked() -> None:
    """The formats the old if-chain sent to the safetensors loader by falling through."""
    assert {LoadFormat.GGUF, LoadFormat.PT} <= set(UNCHECKED)


@pytest.mark.parametrize("fmt", UNCHECKED, ids=lambda f: f.value)
def test_a_format_without_a_loader_is_skipped_not_failed(fmt: LoadFormat, tmp_path: Path) -> None:
    files = files_yaml(("config.json", 10, SHA), ("model.gguf", 1000, "b" * 64), ("pytorch_model.bin", 1000, "c" * 64))
    text = manifest_text("weights", fmt=fmt.value, files=files, extra="allow_code: pickle weights of the loader test\n")
    if fmt is LoadFormat.DATASET:
        text = text.replace("  revision:", "  repo_type: dataset\n  revision:")
    cat = catalog.load(write_catalog(tmp_path, {"weights.yaml": text}))
    store = LocalStore(tmp_path / "empty-store")
    assert loader_for(cat.get("weights")) is None
    report = check_load(cat, "weights", store=store, cache=Cache(tmp_path / "cache"))
    assert report.ok and report.skipped == f"no load check for {fmt.value}"
    assert report.problems == [] and report.tensors == 0
    assert report.to_json()["skipped"] == report.skipped and report.to_json()["ok"] is True
    assert sum(store.requests.values()) == 0  # nothing resolved, nothing read
    with pytest.raises(LoadError, match="no loader reads this load format"):
        load_weights(cat, "weights", store=store, cache=Cache(tmp_path / "cache"))


def test_a_loaded_report_says_it_was_not_skipped(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("safetensors")
    pytest.importorskip("torch")
    store = LocalStore(tmp_path / "store")
    upload_from_dir(bundled, "tiny-llama", sources["tiny-llama"], store)
    report = check_load(bundled, "tiny-llama", store=store, cache=Cache(tmp_path / "cache"))
    assert report.ok and report.skipped is None and report.tensors > 0
    assert report.to_json()["skipped"] is None


# ---------------------------------------------------------------------------------------------------------
# where a streaming loader reads from, and in which environment


def test_stream_target_comes_from_the_store_alone(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store reports the endpoint its client really uses, boto3's own lookups included: none here.
    for variable in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(variable, raising=False)
    assert stream_target(LocalStore(tmp_path / "store")) == LOCAL
    s3 = S3Store(
        "bucket",
        "",
        S3Options(endpoint_url="http://127.0.0.1:1", region="eu-west-3", addressing_style="path", unsigned=True),
    )
    target = stream_target(s3)
    assert (
        target.scheme == "s3"
        and target.endpoint == "http://127.0.0.1:1"
        and target.region == "eu-west-3"
        and target.unsigned
    )
    assert target.addressing == "path" and target.where == "endpoint http://127.0.0.1:1"
    assert dict(target.env) == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
        "AWS_REGION": "eu-west-3",
        "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0",
        "RUNAI_STREAMER_S3_UNSIGNED": "1",
    }
    default = stream_target(S3Store("bucket", "", S3Options()))  # AWS itself: nothing to say, still S3
    assert default.remote and default.endpoint is None and default.where == "the default s3:// endpoint"
    # Weights materialized into the cache are local files, whatever the store.
    folder = tmp_path / "folder-store"
    upload_from_dir(bundled, "tiny-qwen2", sources["tiny-qwen2"], open_store(str(folder)))
    local = resolve(
        bundled,
        "tiny-qwen2",
        cache=Cache(tmp_path / "cache"),
        store=open_store(str(folder)),
        options=ResolveOptions(materialize_weights=True),
    )
    assert not local.streams and stream_target(s3, local) == LOCAL


def test_scoped_environ_overlays_then_restores_and_defaults_only_where_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CATALOG_TEST_KEPT", "user")
    monkeypatch.delenv("CATALOG_TEST_NEW", raising=False)
    monkeypatch.delenv("CATALOG_TEST_DEFAULT", raising=False)
    with scoped_environ(
        {"CATALOG_TEST_NEW": "1"}, defaults={"CATALOG_TEST_KEPT": "default", "CATALOG_TEST_DEFAULT": "d"}
    ):
        assert os.environ["CATALOG_TEST_NEW"] == "1"
        assert os.environ["CATALOG_TEST_KEPT"] == "user"  # the user's value wins over a default
        assert os.environ["CATALOG_TEST_DEFAULT"] == "d"
    assert "CATALOG_TEST_NEW" not in os.environ and "CATALOG_TEST_DEFAULT" not in os.environ
    assert os.environ["CATALOG_TEST_KEPT"] == "user"


def test_runai_never_logs_below_info_unless_the_user_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """runai's DEBUG log names credentials: a load sets its level to INFO or quieter, never DEBUG."""
    import logging

    monkeypatch.delenv("RUNAI_STREAMER_LOG_LEVEL", raising=False)
    logger = logging.getLogger("resolver")
    saved = logger.level
    try:
        for level, expected in ((logging.DEBUG, "INFO"), (logging.INFO, "INFO"), (logging.WARNING, "WARNING")):
            logger.setLevel(level)
            with scoped_environ({}):
                assert os.environ["RUNAI_STREAMER_LOG_LEVEL"] == expected
        monkeypatch.setenv("RUNAI_STREAMER_LOG_LEVEL", "DEBUG")
        with scoped_environ({}):
            assert os.environ["RUNAI_STREAMER_LOG_LEVEL"] == "DEBUG"  # set by the user: kept
    finally:
        logger.setLevel(saved)
    assert os.environ["RUNAI_STREAMER_LOG_LEVEL"] == "DEBUG"


# ---------------------------------------------------------------------------------------------------------
# tensorizer: the whole .tensors file against its pin


def wrong_pin_catalog(tmp_path: Path, sha256: str) -> Catalog:
    """The bundled tiny-llama-tensorizer (and its twin) with model.tensors pinned to `sha256`, same size."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    for name in ("catalog", "tiny-llama"):
        shutil.copy(ROOT / "manifests" / f"{name}.yaml", manifests)
    data = yaml.safe_load((ROOT / "manifests" / "tiny-llama-tensorizer.yaml").read_text())
    data["files"] = [dict(f, sha256=sha256) if f["path"] == "model.tensors" else f for f in data["files"]]
    (manifests / "tiny-llama-tensorizer.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return catalog.load(manifests)


@pytest.fixture
def tensorizer_store(bundled: Catalog, sources: dict[str, Path], tmp_path: Path) -> LocalStore:
    """A folder store holding tiny-llama-tensorizer and tiny-llama, uploaded against the true pins."""
    pytest.importorskip("torch")
    pytest.importorskip("tensorizer")
    pytest.importorskip("safetensors")
    store = LocalStore(tmp_path / "store")
    for name in ("tiny-llama-tensorizer", "tiny-llama"):
        upload_from_dir(bundled, name, sources[name], store)
    return store


def test_tensorizer_streamed_with_its_true_pin_is_ok(
    bundled: Catalog, tensorizer_store: LocalStore, tmp_path: Path
) -> None:
    report = check_load(bundled, "tiny-llama-tensorizer", store=tensorizer_store, cache=Cache(tmp_path / "cache"))
    assert report.ok, report.problems
    assert report.uri.startswith(str(tensorizer_store.root)) and report.uri.endswith("/model.tensors")  # streamed
    assert report.compared_with == "tiny-llama" and report.tensors == 21


def test_tensorizer_streamed_against_a_wrong_pin_is_reported(
    bundled: Catalog, tensorizer_store: LocalStore, tmp_path: Path
) -> None:
    """tensorizer's own per-tensor hashes pass and the tensors equal the twin's: only the whole-file hash
    can tell that the bytes are not the pinned ones."""
    real = bundled.get("tiny-llama-tensorizer").file("model.tensors")
    assert real is not None
    wrong = "0" * 64
    cat = wrong_pin_catalog(tmp_path, wrong)
    report = check_load(cat, "tiny-llama-tensorizer", store=tensorizer_store, cache=Cache(tmp_path / "cache"))
    assert not report.ok and report.tensors == 21 and report.compared_with == "tiny-llama"
    assert len(report.problems) == 1, report.problems
    problem = report.problems[0]
    assert problem.startswith("tiny-llama-tensorizer/model.tensors: ")
    assert f"hashes to {real.sha256}" in problem and f"the pin says {wrong}" in problem
    assert report.to_json()["problems"] == [problem]


def test_tensorizer_materialized_against_a_wrong_pin_never_loads(tensorizer_store: LocalStore, tmp_path: Path) -> None:
    """Materialized weights are verified by resolve on their way into the cache, before any load."""
    cat = wrong_pin_catalog(tmp_path, "0" * 64)
    with pytest.raises(IntegrityError) as caught:
        check_load(
            cat,
            "tiny-llama-tensorizer",
            store=tensorizer_store,
            cache=Cache(tmp_path / "cache"),
            options=ResolveOptions(materialize_weights=True),
        )
    assert caught.value.path == "model.tensors" and caught.value.expected == "0" * 64
