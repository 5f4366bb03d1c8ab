"""A derived record is untrusted input (anyone with write access to the store's derived area could have written it):
bounded, checked against its key and kind, every path inside the kind's folders, before anything trusts it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from catalog import derived
from catalog.derived import VLLM_COMPILE, DerivedError, DerivedFile, Record, collectable, json_depth, parse_record

INPUTS: dict[str, Any] = {
    "format": 1,
    "kind": "vllm-compile",
    "recipe": 1,
    "pins": "p" * 64,
    "engine": {},
    "platform": {},
    "args": [],
    "env": {},
}
KEY = derived.key_of(INPUTS)
FILES = (DerivedFile("modelinfos/llama.json", 3, "a" * 64), DerivedFile("torchinductor/fxgraph/ab/c.so", 5, "b" * 64))


def raw(**changes: Any) -> dict[str, Any]:
    data = json.loads(Record("vllm-compile", KEY, INPUTS, FILES, 1.0, "tiny-llama").to_json())
    data.update(changes)
    return data


def parse(data: Any) -> Record:
    return parse_record(
        json.dumps(data).encode() if not isinstance(data, bytes) else data, VLLM_COMPILE, KEY, "s3://b/k"
    )


def test_a_record_reads_back_as_written() -> None:
    record = parse(raw())
    assert (record.files, record.inputs, record.model, record.total) == (FILES, INPUTS, "tiny-llama", 8)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"x" * (derived.MAX_RECORD_BYTES + 1), "more than the"),
        (b"[" * 10_000 + b"]" * 10_000, "deeper than"),
        (b"{not json", "not JSON"),
        ([], "not a record of format"),
        (raw(format=2), "not a record of format"),
        (raw(kind="engine-snapshot"), "not a vllm-compile record"),
        (raw(key="0" * 64), "do not hash to the key"),
        (raw(inputs={**INPUTS, "pins": "q" * 64}), "do not hash to the key"),  # a record moved under another key
        (raw(files={}), "no inputs object or files list"),
        (raw(files=["x"]), "is not an object"),
        (raw(files=[{"path": "../etc/passwd", "size": 1, "sha256": "a" * 64}]), "is not a path"),
        (raw(files=[{"path": "/abs/x", "size": 1, "sha256": "a" * 64}]), "is not a path"),
        (raw(files=[{"path": "torchinductor/../../x", "size": 1, "sha256": "a" * 64}]), "is not a path"),
        (raw(files=[{"path": ".bashrc", "size": 1, "sha256": "a" * 64}]), "is not a path"),
        (raw(files=[{"path": "elsewhere/x.so", "size": 1, "sha256": "a" * 64}]), "is not a path"),
        (raw(files=[{"path": "torchinductor/locks/x.lock", "size": 1, "sha256": "a" * 64}]), "is not a path"),
        (raw(files=[{"path": "torchinductor/a", "size": -1, "sha256": "a" * 64}]), "is not a whole number"),
        (raw(files=[{"path": "torchinductor/a", "size": True, "sha256": "a" * 64}]), "is not a whole number"),
        (raw(files=[{"path": "torchinductor/a", "size": 1, "sha256": "A" * 64}]), "is not 64 lowercase hex"),
        (raw(files=[{"path": "torchinductor/a", "size": 1, "sha256": "a" * 64}] * 2), "listed twice"),
        (
            raw(
                files=[
                    {"path": "torchinductor/a", "size": 1, "sha256": "a" * 64},
                    {"path": "torchinductor/a/b", "size": 1, "sha256": "a" * 64},
                ]
            ),
            "both a file and a folder",
        ),
    ],
)
def test_a_bad_record_is_refused_naming_why(data: Any, why: str) -> None:
    with pytest.raises(DerivedError, match=why) as caught:
        parse(data)
    assert "s3://b/k" in caught.value.message and caught.value.hint


def test_json_depth_ignores_brackets_inside_strings() -> None:
    assert json_depth(b'{"a": "[[[[{{{{", "b": [1, [2]]}') == 3
    assert json_depth(b'"\\"[["') == 0


@pytest.mark.parametrize(
    ("path", "kept"),
    [
        ("torchinductor/fxgraph/2n/f2nb/oysx", True),
        ("torch_compile_cache/torch_aot_compile/ab12/rank_0_0/model", True),
        ("modelinfos/vllm-model_executor-models-llama-LlamaForCausalLM.json", True),
        ("torchinductor/locks/cfdek.lock", False),  # a lock, in a locks folder
        ("torchinductor/x.lock", False),
        ("torchinductor/fxgraph/ab/.123.456.tmp", False),  # torch's write_atomic temp
        ("modelinfos/tmpab12cd_3", False),  # vLLM's atomic_writer (mkstemp)
        ("modelinfos/.x.json~catalog.1-ab", False),  # a hidden name
        ("torchinductor/precompiled_headers/h.gch", False),
        ("dummy_cache/x", False),  # not one of the kind's folders
        ("assets/model_streamer/abc/config.json", False),
        (".model-catalog/vllm-compile/tiny-llama.json", False),  # restore's own note
        ("modelinfos", False),  # a folder's name alone
    ],
)
def test_what_an_entry_may_hold(path: str, kept: bool) -> None:
    assert collectable(VLLM_COMPILE, path) is kept


def test_store_keys_stay_in_the_derived_area() -> None:
    assert (
        derived.record_key("model-catalog/tiny-llama/a0/", "vllm-compile", KEY)
        == f".model-catalog/derived/model-catalog/tiny-llama/a0/vllm-compile/{KEY}/index.json"
    )
    assert derived.blob_key("ab" + "c" * 62) == f".model-catalog/derived-blobs/ab/ab{'c' * 62}"
    with pytest.raises(DerivedError):
        derived.blob_key("../x")


def test_a_whole_store_sync_leaves_derived_entries_alone() -> None:
    """Derived records and blobs lie under no model's prefix, yet they are no orphans: `sync --prune
    --delete-orphans` must never plan to delete them (nor `sync --check` call them drift)."""
    from catalog.schema import ModelManifest
    from resolver.stores import ObjectInfo
    from resolver.sync import plan

    model = ModelManifest.model_validate(
        {
            "name": "m",
            "source": {"hf_repo": "org/m", "revision": "0" * 40},
            "s3_prefix": "s3://b/m/",
            "load_format": "safetensors",
            "files": [],
        }
    )
    listing = [
        ObjectInfo(derived.record_key("m/", "vllm-compile", KEY), 10, "e"),
        ObjectInfo(derived.blob_key("a" * 64), 3, "e"),
        ObjectInfo("stray/object", 1, "e"),
    ]
    items = plan([model], {"m": "m/"}, listing, {}, whole_store=True, prune=True, delete_orphans=True).items
    assert [(i.action.value, i.key) for i in items] == [("orphan", "stray/object")]
