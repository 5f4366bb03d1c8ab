"""`--load-format catalog` inside vLLM: the engine's loader refuses a tensor whose bytes changed in the bucket after
`catalog resolve` proved the objects, before the model sees it; the same with the arguments of a warm answer. Every
load says in its record (CATALOG_LOAD_RECORD) which tensors it delivered, so the test counts them.

A test file of its own: its session fixtures (one sync of the bundled models into a fresh bucket) are this file's
worker's (engine_support.py says how the engine tier is grouped)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from engine_support import EngineSession, Reference, assert_matches, job

from catalog.lookup import Catalog
from catalog.settings import S3Options
from resolver.stores import make_s3_client

NAME, SHARD = "tiny-qwen2", "model-00001-of-00002.safetensors"


def records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_byte_changed_in_the_bucket_after_resolve_is_refused_inside_the_engine(
    engine_session: EngineSession,
    bundled: Catalog,
    sources: dict[str, Path],
    references: dict[str, Reference],
    tmp_path: Path,
) -> None:
    # A cache of its own: the session's holds tiny-qwen2's weights (the references were computed from them), and the
    # loader takes a verified local copy before the bucket. This one holds only config and tokenizer.
    s = EngineSession(
        engine_session.store, tmp_path / "cache", engine_session.home, engine_session.hub_url, engine_session.env
    )
    stream = ("--prefer", "stream")
    args = s.vllm_args(NAME, *stream)
    assert args[args.index("--load-format") + 1] == "catalog" and "--model-loader-extra-config.model=tiny-qwen2" in args
    env = s.exported("resolve", NAME, *stream)
    record = tmp_path / "loads.jsonl"

    clean = s.run([job("clean", args, NAME, {**env, "CATALOG_LOAD_RECORD": str(record)})])["clean"]
    assert_matches(clean, references[NAME], served=NAME)
    [loaded] = records(record)
    pinned = sum(f.header.tensors for f in bundled.get(NAME).files if f.header is not None)
    assert loaded["ok"] and loaded["tensors"] == pinned  # every tensor, each verified, from the bucket
    assert all(where.startswith(s.store) for f in loaded["files"] for where in f["by_source"])  # type: ignore[union-attr]

    # One byte of the third tensor of the first shard, rewritten in the bucket after resolve proved the objects.
    from catalog.load_plan import plan
    from resolver.loaders.common import pinned_tables

    manifest = bundled.get(NAME)
    [first] = [f for f in plan(manifest, pinned_tables(bundled, manifest)) if f.entry.path == SHARD]
    victim = first.tensors[2]
    data = bytearray((sources[NAME] / SHARD).read_bytes())
    data[victim.start] ^= 0x01
    client = make_s3_client(S3Options(endpoint_url=os.environ["AWS_ENDPOINT_URL"], addressing_style="path"))
    client.put_object(
        Bucket=s.store.removeprefix("s3://").strip("/"), Key=bundled.store_key(manifest, SHARD), Body=bytes(data)
    )

    warm = s.vllm_args(NAME, *stream)  # the warm index answers within the proof's age: the same arguments
    assert warm == args
    results = s.run(
        [
            job(run, a, NAME, {**env, "CATALOG_LOAD_RECORD": str(record)})
            for run, a in (("after-resolve", args), ("after-warm-answer", warm))
        ]
    )
    for run in ("after-resolve", "after-warm-answer"):
        assert not results[run].ok
        assert f"tensor {victim.name}" in (results[run].error or "") and "refused before the model saw it" in (
            results[run].error or ""
        )
    refused = records(record)[1:]
    assert len(refused) == 2
    for one in refused:
        assert not one["ok"]
        files = {f["path"]: f for f in one["files"]}  # type: ignore[union-attr]
        assert [r["tensor"] for r in files[SHARD]["refused"]] == [victim.name]
        assert files[SHARD]["delivered"] < files[SHARD]["tensors"]  # the refused tensor was never delivered
