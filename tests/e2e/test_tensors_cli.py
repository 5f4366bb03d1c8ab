"""The tensor pins as a user meets them on the command line: validate fails a broken checkpoint at file:line with
no request to any store, show prints the inventory, and resolve's engine arguments follow the filesystem of the
folder it hands out, in a warm answer too."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from checkpoints import INDEX, u8, write_checkpoint
from helpers import REV, manifest_text, write_catalog
from hubdouble import HubDouble
from servers import FaultProxy, SeaweedServer, new_bucket, s3_env

from catalog.lookup import Catalog
from resolver.mounts import filesystem_type
from resolver.stores import open_store
from resolver.upload import upload_from_dir

ROOT = Path(__file__).resolve().parents[2]
S1, S2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "catalog", *args], capture_output=True, text=True, env=env)


def isolated(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "HF_HOME": str(tmp_path / "hf"),
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        **extra,
    }
    env.pop("HF_TOKEN", None)
    return env


@pytest.fixture
def broken_hub(tmp_path: Path) -> Iterator[HubDouble]:
    """A Hub repo whose index maps a tensor to a shard that lacks it, names one no shard has, and whose two
    shards both hold `a`."""
    shards = {S1: {"a": u8(1), "b": u8(2)}, S2: {"a": u8(3), "c": u8(4)}}
    src = write_checkpoint(tmp_path / "src", shards, {"a": S1, "b": S2, "c": S2, "ghost": S1})
    double = HubDouble()
    double.add_repo("org/broken", REV, src)
    yield double
    double.close()


def test_validate_fails_a_broken_checkpoint_at_file_line_with_no_request_to_any_store(
    tmp_path: Path, broken_hub: HubDouble, s3_server: SeaweedServer
) -> None:
    folder = write_catalog(tmp_path, {"broken.yaml": manifest_text("broken", files="")[: -len("files:\n")]})
    env = isolated(tmp_path, CATALOG_DIR=str(folder), HF_ENDPOINT=broken_hub.url)
    locked = run(env, "lock", "broken")
    assert locked.returncode == 0, locked.stderr  # lock pins what the Hub has; judging it is validate's job

    proxy = FaultProxy(int(s3_server.url.rsplit(":", 1)[1]))
    try:
        before = broken_hub.hub_requests()
        bucket = new_bucket(s3_server.url)
        done = subprocess.run(
            [sys.executable, "-m", "catalog", "validate"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**env, **s3_env(proxy.url), "CATALOG_STORE": f"s3://{bucket}/"},
        )
        assert broken_hub.hub_requests() == before and sum(proxy.requests.values()) == 0  # no byte from any store
    finally:
        proxy.close()
    assert done.returncode == 1
    # The sidecar, one entry a line: S1 at 4 (a 5, b 6), S2 at 8 (a 9, c 10), the index at 12 (a 13, b 14, c 15, ghost 16).
    assert done.stdout.splitlines() == [
        f"manifests/broken.tensors.json:9: {S2}: tensor 'a' is in '{S1}' (manifests/broken.tensors.json:5) and in '{S2}', "
        f"both shards of '{INDEX}': which copy loads is up to the engine; fix the checkpoint upstream or pin another "
        "revision  [tensor-duplicate]",
        f"manifests/broken.tensors.json:14: {INDEX}: weight_map maps tensor 'b' to '{S2}', which does not hold it; '{S1}' "
        "does: the index and the shards disagree, and a loader that reads the shard the index names finds nothing; fix "
        "the checkpoint upstream or pin another revision  [tensor-missing]",
        f"manifests/broken.tensors.json:16: {INDEX}: weight_map maps tensor 'ghost' to '{S1}', which does not hold it; nor "
        "does any other shard: the checkpoint lacks it, and an engine reports it missing or leaves the weight "
        "uninitialized; fix the checkpoint upstream or pin another revision  [tensor-missing]",
    ]
    # pre-commit passes the changed sidecar alone: it stands for its manifest
    alone = subprocess.run(
        [sys.executable, "-m", "catalog", "validate", "manifests/broken.tensors.json", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert alone.returncode == 1
    assert [(p["line"], p["rule"]) for p in json.loads(alone.stdout)["problems"]] == [
        (9, "tensor-duplicate"),
        (14, "tensor-missing"),
        (16, "tensor-missing"),
    ]


def test_show_prints_the_tensor_inventory(tmp_path: Path, sources: dict[str, Path]) -> None:
    folder = tmp_path / "manifests"
    shutil.copytree(ROOT / "manifests", folder)
    # As a manifest locked before headers were pinned: no header or weight_map blocks, no tensor tables.
    manifest = folder / "tiny-qwen2.yaml"
    manifest.write_text(re.sub(r"    (header|weight_map):\n(      .*\n)+", "", manifest.read_text()))
    (folder / "tiny-qwen2.tensors.json").unlink()
    env = isolated(tmp_path, CATALOG_DIR=str(folder))
    before = run(env, "show", "tiny-qwen2")
    assert before.stdout.rstrip().endswith(
        "# 2 safetensors file(s) without a pinned header: run `catalog lock tiny-qwen2`"
    )
    assert run(env, "lock", "tiny-qwen2", "--from-dir", str(sources["tiny-qwen2"])).returncode == 0
    shown = run(env, "show", "tiny-qwen2")
    comments = [line for line in shown.stdout.splitlines() if line.startswith("#")]
    # What the safetensors library itself reads from the two shards (all bf16: two bytes a parameter).
    from safetensors import safe_open

    count = parameters = 0
    for shard in sorted(sources["tiny-qwen2"].glob("*.safetensors")):
        with safe_open(str(shard), "np") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is no dict
                count += 1
                parameters += math.prod(f.get_slice(key).get_shape())
    size = parameters * 2
    assert comments == [
        f"# tensors: {count} in 2 safetensors file(s), {parameters:,} parameters, {size / 1024:.1f} KiB",
        f"#   BF16: {size:,} bytes ({size / 1024:.1f} KiB)",
    ]
    assert yaml.safe_load(shown.stdout)["name"] == "tiny-qwen2"  # the inventory is comments: still the manifest
    data = json.loads(run(env, "show", "tiny-qwen2", "--format", "json").stdout)
    assert data["tensors"] == {
        "files": 2,
        "count": count,
        "parameters": parameters,
        "bytes_by_dtype": {"BF16": size},
        "bytes": size,
        "unpinned": [],
    }


def test_a_warm_answer_carries_the_filesystem_the_full_cli_found(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    upload_from_dir(bundled, "tiny-llama", sources["tiny-llama"], open_store(str(tmp_path / "store")))
    env = isolated(
        tmp_path,
        CATALOG_DIR=str(ROOT / "manifests"),
        CATALOG_STORE=str(tmp_path / "store"),
        CATALOG_CACHE=str(tmp_path / "cache"),
    )
    cold = json.loads(run(env, "resolve", "tiny-llama", "--format", "json").stdout)
    assert cold["filesystem"] == filesystem_type(Path(cold["path"])) is not None
    probe = (
        "import runpy, sys\nsys.argv = ['catalog'] + sys.argv[1:]\n"
        "try:\n    runpy.run_module('catalog', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('pydantic' in sys.modules, file=sys.stderr)\n"
    )
    for fmt in ("json", "vllm-args"):  # the engine arguments depend on the filesystem (resolver/mounts.py)
        warm = subprocess.run(
            [sys.executable, "-c", probe, "resolve", "tiny-llama", "--format", fmt],
            capture_output=True,
            text=True,
            env=env,
        )
        assert warm.stderr.strip().splitlines()[-1] == "False"  # answered by the warm path
        full = run(env, "--verbose", "resolve", "tiny-llama", "--format", fmt)  # -v: never answered warm
        assert warm.stdout == full.stdout, fmt
        if fmt == "json":
            assert json.loads(warm.stdout)["filesystem"] == cold["filesystem"]
