"""`catalog lock` pins safetensors headers from ranged reads: a 100-shard model from the Hub double and from
SeaweedFS (`--from-store`, requests counted at a proxy in front of it), at most two reads per shard, the same
bytes every time; a file that is not valid safetensors is refused naming it, nothing written."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from checkpoints import INDEX, many_shards, shard_name, u8, write_checkpoint
from helpers import REV, manifest_text, write_catalog
from hubdouble import HubDouble
from servers import FaultProxy, SeaweedServer, new_bucket, s3_env

import catalog
from catalog.tensor_tables import parse
from resolver.examples import safetensors_bytes
from resolver.headers import PROBE
from resolver.lock import render_files_block
from resolver.stores import open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]
SHARDS = 100
LONG = PROBE + 10_000  # shard 1's header needs a second read


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return many_shards(tmp_path_factory.mktemp("big") / "org-big", SHARDS, long_header=LONG)


@pytest.fixture
def hub(big: Path) -> Iterator[HubDouble]:
    double = HubDouble()
    double.add_repo("org/big", REV, big)
    yield double
    double.close()


def new_catalog(root: Path) -> Path:
    """A catalog whose one manifest, `big`, pins nothing yet."""
    return write_catalog(root, {"big.yaml": manifest_text("big", files="")[: -len("files:\n")]})


def cli(root: Path, folder: Path, *args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "CATALOG_DIR": str(folder),
        "HOME": str(root / "home"),
        "HF_HOME": str(root / "hf"),
        "AWS_CONFIG_FILE": str(root / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(root / "no-aws-credentials"),
        **(extra or {}),
    }
    env.pop("HF_TOKEN", None)
    return subprocess.run([sys.executable, "-m", "catalog", *args], capture_output=True, text=True, env=env)


def pinned(folder: Path) -> tuple[bytes, bytes]:
    return (folder / "big.yaml").read_bytes(), (folder / "big.tensors.json").read_bytes()


def without_digests(manifest: bytes, tables: bytes) -> tuple[bytes, bytes]:
    """The pins with each tensor's digest left out (and the table digests that cover them)."""
    return re.sub(rb"table_sha256: [0-9a-f]{64}", b"table_sha256: -", manifest), re.sub(
        rb', "[0-9a-f]{64}"\]', b"]", tables
    )


def test_a_100_shard_model_is_locked_from_the_hub_with_at_most_two_reads_per_shard(
    tmp_path: Path, hub: HubDouble, big: Path
) -> None:
    folder = new_catalog(tmp_path / "one")
    done = cli(tmp_path, folder, "lock", "big", extra={"HF_ENDPOINT": hub.url})
    assert done.returncode == 0, done.stderr
    reads = {
        s: hub.requests[f"GET /org/big/resolve/{REV}/{s}"]
        for s in (shard_name(i, SHARDS) for i in range(1, SHARDS + 1))
    }
    assert reads[shard_name(1, SHARDS)] == 2 and set(list(reads.values())[1:]) == {1}  # only the long header costs two
    sizes = {s: (big / s).stat().st_size for s in reads}
    assert all(hub.sent[f"/org/big/resolve/{REV}/{s}"] < sizes[s] or sizes[s] <= PROBE for s in reads)
    assert hub.sent[f"/org/big/resolve/{REV}/{shard_name(1, SHARDS)}"] < 2 * LONG  # the header, not the tensors

    files = {f["path"]: f for f in yaml.safe_load((folder / "big.yaml").read_text())["files"]}
    assert all(files[s]["header"]["tensors"] == 2 for s in list(reads)[1:])
    assert files[INDEX]["weight_map"]["tensors"] == sum(files[s]["header"]["tensors"] for s in reads)
    tables = parse((folder / "big.tensors.json").read_text())
    assert len(tables.headers) == SHARDS and tables.weight_maps[INDEX]["model.layers.7.bias"] == shard_name(7, SHARDS)
    assert cli(tmp_path, folder, "validate").returncode == 0

    # Pins are byte-identical across locks: again in place (nothing to change), and from scratch elsewhere.
    first = pinned(folder)
    again = cli(tmp_path, folder, "lock", "big", extra={"HF_ENDPOINT": hub.url})
    assert again.returncode == 0 and "up to date" in again.stderr and pinned(folder) == first
    other = new_catalog(tmp_path / "two")
    assert cli(tmp_path, other, "lock", "big", extra={"HF_ENDPOINT": hub.url}).returncode == 0
    assert pinned(other) == first
    assert cli(tmp_path, folder, "lock", "--check", "big", extra={"HF_ENDPOINT": hub.url}).returncode == 0


@pytest.fixture
def proxied(s3_server: SeaweedServer) -> Iterator[tuple[FaultProxy, str]]:
    proxy = FaultProxy(int(s3_server.url.rsplit(":", 1)[1]))
    yield proxy, new_bucket(s3_server.url)
    proxy.close()


def test_the_same_pins_come_from_seaweedfs_with_at_most_two_reads_per_shard(
    tmp_path: Path, big: Path, proxied: tuple[FaultProxy, str]
) -> None:
    proxy, bucket = proxied
    from_dir = new_catalog(tmp_path / "dir")
    assert cli(tmp_path, from_dir, "lock", "big", "--from-dir", str(big)).returncode == 0
    expected = pinned(from_dir)
    upload_from_dir(catalog.load(from_dir), "big", big, open_store(f"s3://{bucket}/"))  # and sync's records of it

    # A manifest locked before headers were pinned: the same files, no header, no weight_map, no tables.
    folder = new_catalog(tmp_path / "store")
    entries = [
        e.model_copy(update={"header": None, "weight_map": None}) for e in catalog.load(from_dir).get("big").files
    ]
    text = (folder / "big.yaml").read_text()
    (folder / "big.yaml").write_text(text + render_files_block(entries))
    done = cli(tmp_path, folder, "lock", "big", "--from-store", "--store", f"s3://{bucket}/", extra=s3_env(proxy.url))
    assert done.returncode == 0, done.stderr
    assert "recorded headers" in done.stderr
    # The bucket's copies gave the very same pins; only the tensor digests are not there: a header read is not every byte
    assert without_digests(*pinned(folder)) == without_digests(*expected)
    assert re.search(rb'"[0-9a-f]{64}"', expected[1]) and not re.search(rb'"[0-9a-f]{64}"', pinned(folder)[1])
    reads = {i: proxy.requests[f"GET /{bucket}/org/big/{shard_name(i, SHARDS)}"] for i in range(1, SHARDS + 1)}
    assert reads.pop(1) == 2 and set(reads.values()) == {1}
    assert proxy.requests[f"GET /{bucket}"] == 1  # one listing (and sync's record), to prove the objects first


def test_tensor_digests_are_pinned_from_the_stores_verified_bytes_when_locked_from_the_hub(
    tmp_path: Path, hub: HubDouble, big: Path, bucket: str
) -> None:
    """The Hub's metadata pins files without reading them, so no tensor digest; `--tensor-digests` reads every weight
    byte from the store (verified against the pins on the way) and pins the same digests a lock from the folder does."""
    from_dir = new_catalog(tmp_path / "dir")
    assert cli(tmp_path, from_dir, "lock", "big", "--from-dir", str(big)).returncode == 0
    folder = new_catalog(tmp_path / "hub")
    assert cli(tmp_path, folder, "lock", "big", extra={"HF_ENDPOINT": hub.url}).returncode == 0
    assert not re.search(rb'"[0-9a-f]{64}"', pinned(folder)[1])  # headers only
    upload_from_dir(catalog.load(from_dir), "big", big, open_store(f"s3://{bucket}/"))
    done = cli(
        tmp_path,
        folder,
        "lock",
        "big",
        "--tensor-digests",
        "--store",
        f"s3://{bucket}/",
        "--cache",
        str(tmp_path / "cache"),
        extra={"HF_ENDPOINT": hub.url},
    )
    assert done.returncode == 0, done.stderr
    # the very same pins and tables, digests included (and the Hub's informational ids, which a folder does not give)
    hub_ids = re.compile(rb"\n    (blob_id|xet_hash): [0-9a-f]+")
    assert pinned(folder)[1] == pinned(from_dir)[1]
    assert hub_ids.sub(b"", pinned(folder)[0]) == pinned(from_dir)[0] and hub_ids.search(pinned(folder)[0])
    # The Hub gave each lock one header read of each shard; every weight byte came from the store
    assert hub.requests[f"GET /org/big/resolve/{REV}/{shard_name(2, SHARDS)}"] == 2


def test_from_store_refuses_objects_sync_never_verified(
    tmp_path: Path, big: Path, proxied: tuple[FaultProxy, str]
) -> None:
    proxy, bucket = proxied
    folder = new_catalog(tmp_path / "c")
    assert cli(tmp_path, folder, "lock", "big", "--from-dir", str(big)).returncode == 0
    before = pinned(folder)
    done = cli(tmp_path, folder, "lock", "big", "--from-store", "--store", f"s3://{bucket}/", extra=s3_env(proxy.url))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: ") and "big" in done.stderr and pinned(folder) == before


BAD = {
    "overlap": (
        {
            "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
            "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]},
        },
        3,
        "tensor 'b' starts at data byte 1 and overlaps the tensor before it",
    ),
    "shape x dtype": (
        {"a": {"dtype": "F16", "shape": [3], "data_offsets": [0, 4]}},
        4,
        "tensor 'a' is F16 [3], 6 bytes, but its data_offsets span 4 bytes",
    ),
    "past the end": (
        {"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}},
        4,
        "the tensors end at data byte 8, past the end",
    ),
}


def broken(header: dict[str, object], data: int) -> bytes:
    import struct

    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * data


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("source", ["hub", "dir"])
def test_a_file_that_is_not_valid_safetensors_is_refused_naming_it(tmp_path: Path, case: str, source: str) -> None:
    header, data, says = BAD[case]
    shards = {"model-00001-of-00002.safetensors": {"w": u8(1)}, "model-00002-of-00002.safetensors": {"v": u8(2)}}
    src = write_checkpoint(
        tmp_path / "src", shards, {"w": "model-00001-of-00002.safetensors", "v": "model-00002-of-00002.safetensors"}
    )
    (src / "model-00002-of-00002.safetensors").write_bytes(broken(header, data))
    folder = new_catalog(tmp_path)
    before = (folder / "big.yaml").read_text()
    double = HubDouble()
    try:
        double.add_repo("org/big", REV, src)
        args = ("lock", "big", "--from-dir", str(src)) if source == "dir" else ("lock", "big")
        done = cli(tmp_path, folder, *args, extra={"HF_ENDPOINT": double.url})
    finally:
        double.close()
    assert done.returncode == 1, done.stderr
    first, hint = done.stderr.strip().splitlines()[-2:]
    assert first.startswith(f"error: big/model-00002-of-00002.safetensors: {says}")
    assert hint.startswith("hint: the file is not valid safetensors")
    assert (folder / "big.yaml").read_text() == before and not (folder / "big.tensors.json").exists()


def test_headers_first_recorded_are_no_drift_but_a_recorded_header_that_differs_is(
    tmp_path: Path, hub: HubDouble
) -> None:
    folder = new_catalog(tmp_path / "c")
    assert cli(tmp_path, folder, "lock", "big", extra={"HF_ENDPOINT": hub.url}).returncode == 0
    manifest = folder / "big.yaml"
    locked = manifest.read_text()
    m = catalog.load(folder).get("big")
    bare = [e.model_copy(update={"header": None, "weight_map": None}) for e in m.files]
    manifest.write_text(locked[: locked.index("\nfiles:") + 1] + render_files_block(bare))
    assert cli(tmp_path, folder, "lock", "--check", "big", extra={"HF_ENDPOINT": hub.url}).returncode == 0

    name = shard_name(5, SHARDS)
    entry = m.file(name)
    assert entry is not None and entry.header is not None
    manifest.write_text(locked.replace(entry.header.sha256, "e" * 64))
    done = cli(tmp_path, folder, "lock", "--check", "big", extra={"HF_ENDPOINT": hub.url})
    assert done.returncode == 1
    assert done.stdout.strip() == f"~ {name}: header sha256 {'e' * 64} (2 tensors) -> {entry.header.sha256} (2 tensors)"
    assert manifest.read_text() == locked.replace(entry.header.sha256, "e" * 64)  # --check changes nothing


def test_a_folder_without_safetensors_writes_no_tables(tmp_path: Path, big: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text("{}")
    (src / "model.gguf").write_bytes(b"GGUF")
    folder = write_catalog(tmp_path, {"big.yaml": manifest_text("big", fmt="gguf", files="")[: -len("files:\n")]})
    (folder / "big.tensors.json").write_text("{}")  # stale, from when it pinned safetensors
    assert cli(tmp_path, folder, "lock", "big", "--from-dir", str(src)).returncode == 0
    assert not (folder / "big.tensors.json").exists()
    shutil.rmtree(src)


def test_an_empty_safetensors_file_pins_an_empty_table(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text("{}")
    (src / "model.safetensors").write_bytes(safetensors_bytes({}))
    folder = new_catalog(tmp_path)
    assert cli(tmp_path, folder, "lock", "big", "--from-dir", str(src)).returncode == 0
    assert parse((folder / "big.tensors.json").read_text()).headers == {"model.safetensors": ()}
    assert cli(tmp_path, folder, "validate").returncode == 0


def test_every_bundled_manifest_locks_from_one_folder_of_sources_and_validates(
    tmp_path: Path, sources: dict[str, Path]
) -> None:
    """How the bundled manifests get their headers: `lock --all --from-dir OUT`, OUT/<name>/ per model."""
    out = tmp_path / "out"
    out.mkdir()
    for name, folder in sources.items():
        (out / name).symlink_to(folder)
    folder = tmp_path / "manifests"
    shutil.copytree(ROOT / "manifests", folder)
    done = cli(tmp_path, folder, "lock", "--all", "--from-dir", str(out))
    assert done.returncode == 0, done.stderr
    cat = catalog.load(folder)
    for m in cat:
        safetensors = [f for f in m.files if f.path.endswith(".safetensors")]
        tensorized = [f for f in m.files if f.path.endswith(".tensors")]
        assert all(f.header is not None for f in safetensors) and all(f.table is not None for f in tensorized), m.name
        assert (folder / f"{m.name}.tensors.json").exists() is bool(safetensors or tensorized), m.name
        # lock read every byte: every tensor of every weights file is pinned by its own digest
        tables = parse((folder / f"{m.name}.tensors.json").read_text()) if safetensors or tensorized else None
        for f in safetensors + tensorized:
            assert tables is not None and set(tables.digests[f.path]) == {row[0] for row in tables.headers[f.path]}
    assert cli(tmp_path, folder, "validate").returncode == 0
    assert cli(tmp_path, folder, "lock", "--all", "--check", "--from-dir", str(out)).returncode == 0
    (out / "tiny-sts").unlink()
    missing = cli(tmp_path, folder, "lock", "--all", "--from-dir", str(out))
    assert (
        missing.returncode == 1 and f"error: tiny-sts: no folder {out / 'tiny-sts'} to lock it from" in missing.stderr
    )
