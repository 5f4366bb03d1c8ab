"""The resolver's pure decisions: which files are local, whether a view is still verified, engine arguments."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from catalog.errors import UsageError
from catalog.lookup import Catalog
from catalog.settings import parse_size
from resolver.resolution import Resolution, engine_args, engine_env
from resolver.resolve import plan_files
from resolver.views import FileStamp, Layout, Marker, ViewSpec, ViewState, judge_view


def test_plan_keeps_streamed_weights_remote_and_every_other_pinned_file_local(bundled: Catalog) -> None:
    qwen = bundled.get("tiny-qwen2")
    plan = plan_files(qwen, materialize_weights=False)
    assert [f.path for f in plan.streamed] == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert {f.path for f in plan.local} == {f.path for f in qwen.files} - {f.path for f in plan.streamed}
    assert plan_files(qwen, materialize_weights=True).local == qwen.files
    llama = bundled.get("tiny-llama")
    assert plan_files(llama, materialize_weights=False).local == llama.files  # safetensors: all local


def _spec(bundled: Catalog) -> ViewSpec:
    m = bundled.get("tiny-llama")
    return ViewSpec(m.name, m.source.hf_repo, m.source.revision, Layout.DIR, m.files)


def test_judge_view(bundled: Catalog) -> None:
    spec = _spec(bundled)
    stamps = {f.path: FileStamp(f.size, 100 + i, 1000 + i, f.sha256) for i, f in enumerate(spec.files)}
    marker = Marker(spec.view_id, spec.name, spec.hf_repo, spec.revision, "dir", "models/x", stamps)
    assert Marker.from_json(marker.to_json()) == marker  # what is written is what is read
    assert judge_view(spec, marker, stamps) is ViewState.FRESH
    assert judge_view(spec, None, stamps) is ViewState.MISSING
    assert judge_view(spec, dataclasses.replace(marker, view="other"), stamps) is ViewState.MISSING
    touched = dict(stamps)
    first = spec.files[0].path
    touched[first] = FileStamp(stamps[first].size, 999, stamps[first].inode, stamps[first].sha256)
    assert judge_view(spec, marker, touched) is ViewState.STALE  # modified: mtime changed
    replaced = {**stamps, first: FileStamp(stamps[first].size, stamps[first].mtime_ns, 1, stamps[first].sha256)}
    assert judge_view(spec, marker, replaced) is ViewState.STALE  # replaced: another inode
    assert judge_view(spec, marker, {**stamps, first: None}) is ViewState.STALE  # deleted


def test_view_id_depends_on_files_layout_and_revision(bundled: Catalog) -> None:
    spec = _spec(bundled)
    assert spec.view_id != ViewSpec(spec.name, spec.hf_repo, spec.revision, Layout.HF_CACHE, spec.files).view_id
    assert spec.view_id != ViewSpec(spec.name, spec.hf_repo, spec.revision, Layout.DIR, spec.files[1:]).view_id
    assert spec.view_id.startswith(spec.revision[:12])


def _resolution(**kw: object) -> Resolution:
    base: dict[str, object] = dict(
        name="m",
        hf_repo="org/m",
        revision="a" * 40,
        load_format=__import__("catalog").LoadFormat.SAFETENSORS,
        model="/cache/models/m/x",
        path=Path("/cache/models/m/x"),
        tokenizer=None,
        files=("config.json",),
        streamed=(),
        bytes=1,
        source="cache",
        layout=Layout.DIR,
        hub_cache=None,
        loader={},
        stream_env={},
    )
    base.update(kw)
    return Resolution(**base)  # type: ignore[arg-type]


def test_engine_arguments() -> None:
    from catalog import LoadFormat

    assert engine_args(_resolution()) == [
        "--model",
        "/cache/models/m/x",
        "--served-model-name",
        "m",
        "--load-format",
        "safetensors",
    ]
    streamed = _resolution(
        load_format=LoadFormat.RUNAI_STREAMER,
        model="s3://b/m/",
        tokenizer="/cache/m",
        streamed=("w.safetensors",),
        loader={"concurrency": 4},
        stream_env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9"},
    )
    # The logical name is the served name: a storage URI never becomes the engine's model id or metric label.
    assert engine_args(streamed) == [
        "--model",
        "s3://b/m/",
        "--served-model-name",
        "m",
        "--load-format",
        "runai_streamer",
        "--tokenizer",
        "/cache/m",
        "--model-loader-extra-config.concurrency=4",
    ]
    verified = dataclasses.replace(
        streamed,
        model="/cache/models/m/x",
        verified_loader={"model": "m", "catalog": "/repo/manifests", "cache": "/cache"},
    )
    assert engine_args(verified) == [
        "--model",
        "/cache/models/m/x",
        "--served-model-name",
        "m",
        "--load-format",
        "catalog",
        "--tokenizer",
        "/cache/m",
        "--model-loader-extra-config.cache=/cache",
        "--model-loader-extra-config.catalog=/repo/manifests",
        "--model-loader-extra-config.model=m",
    ]
    sharded = _resolution(
        load_format=LoadFormat.RUNAI_STREAMER_SHARDED, model="s3://b/m/", streamed=("r.safetensors",), tensor_parallel=2
    )
    assert engine_args(sharded)[-2:] == ["--tensor-parallel-size", "2"]
    assert engine_env(streamed) == {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
    hf = _resolution(layout=Layout.HF_CACHE, hub_cache=Path("/cache/hub"))
    assert engine_args(hf)[:4] == ["--model", "org/m", "--revision", "a" * 40]  # the plain repo id: no string rewriting
    assert engine_env(hf) == {"HF_HUB_CACHE": "/cache/hub", "HF_HUB_OFFLINE": "1"}


@pytest.mark.parametrize(
    ("config", "printed"),
    [
        (
            {"concurrency": 4, "distributed": True},
            ["--model-loader-extra-config.concurrency=4", "--model-loader-extra-config.distributed=true"],
        ),
        (
            {"deserialization_kwargs": {"verify_hash": False}, "tensorizer_uri": "s3://b/k/model.tensors"},
            [
                "--model-loader-extra-config.deserialization_kwargs.verify_hash=false",
                "--model-loader-extra-config.tensorizer_uri=s3://b/k/model.tensors",
            ],
        ),
        (
            {
                "name": "1k",
                "other": "true",
                "list": ["a", "b"],
            },  # strings vLLM would read as a number, a bool: JSON strings
            [
                '--model-loader-extra-config.list=["a","b"]',
                '--model-loader-extra-config.name="1k"',
                '--model-loader-extra-config.other="true"',
            ],
        ),
    ],
)
def test_loader_configs_are_printed_in_the_dotted_form_that_survives_word_splitting(
    config: dict[str, object], printed: list[str]
) -> None:
    """vLLM's parser reads `--x.key=value` (value: JSON if it parses, else a size like 1k, else the string): each
    argument round-trips to the config, and carries no whitespace a splice would cut."""
    import json

    from resolver.resolution import loader_config_args

    args = loader_config_args(config)
    assert args == printed and all(" " not in a for a in args)
    back: dict[str, object] = {}
    for arg in args:
        keys, value = arg.removeprefix("--model-loader-extra-config.").split("=", 1)
        *parents, last = keys.split(".")
        node = back
        for key in parents:
            node = node.setdefault(key, {})  # type: ignore[assignment]
        node[last] = json.loads(value) if value[:1] in '"[{' or value in ("true", "false") or value.isdigit() else value
    assert back == config


@pytest.mark.parametrize(
    ("text", "size"),
    [("1048576", 1 << 20), ("64MiB", 64 << 20), ("8M", 8 << 20), ("1GiB", 1 << 30), ("16mb", 16 << 20)],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_parse_size_refuses_nonsense() -> None:
    with pytest.raises(UsageError):
        parse_size("lots")


def test_stamp_holds_and_worth_rehash() -> None:
    from resolver.views import stamp_holds, worth_rehash

    then = FileStamp(10, 100, 7, "a" * 64, 500)
    assert stamp_holds(then, then)
    moved = FileStamp(10, 100, 7, "a" * 64, 600)  # ctime only: a link elsewhere, or an edit with mtime put back
    assert not stamp_holds(then, moved) and worth_rehash(then, moved)
    assert stamp_holds(then, moved, record=moved)  # the blob's own record, taken after the cache linked it
    assert not stamp_holds(then, moved, record=FileStamp(10, 100, 7, "a" * 64, 550))
    assert worth_rehash(then, FileStamp(10, 999, 7, "a" * 64, 600))  # touched
    assert not worth_rehash(then, FileStamp(11, 999, 7, "a" * 64, 600))  # resized: changed for sure
    # another inode of the same size: a replaced file, or a `cp -a` copy of the whole cache; the hash tells which
    assert worth_rehash(then, FileStamp(10, 100, 8, "a" * 64, 900))
    assert not worth_rehash(then, None)


def test_extra_paths() -> None:
    from resolver.views import extra_paths

    pinned = {"config.json", "1_Pooling/config.json", "a/b/c.json"}
    present = {
        "config.json",
        "1_Pooling",
        "1_Pooling/config.json",
        "a",
        "a/b",
        "a/b/c.json",
        "modeling_llama.py",
        "nested",
        "nested/x.py",
        "a/b/chat_template.json",
    }
    assert extra_paths(pinned, present) == ["a/b/chat_template.json", "modeling_llama.py", "nested", "nested/x.py"]
