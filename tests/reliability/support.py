"""Helpers shared by the reliability tests (and bench/load_resolve.py): running the real CLI, checking
a cache's invariants from the outside, and generating catalogs of many small models.

Nothing here imitates the code under test: invariants are checked by re-hashing bytes on disk and by
listing folders, the way an operator would.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
BUNDLED = ROOT / "manifests"
if str(TESTS) not in sys.path:  # servers.py, hubdouble.py, helpers.py (tests/conftest.py does the same)
    sys.path.insert(0, str(TESTS))

from hubdouble import HubDouble
from servers import FaultProxy, MotoServer, SeaweedServer, free_port, new_bucket, s3_env

# The tests run against SeaweedFS (SeaweedServer); MotoServer stays exported for bench/load_resolve.py.
__all__ = [
    "BUNDLED",
    "FaultProxy",
    "HubDouble",
    "MotoServer",
    "ROOT",
    "SeaweedServer",
    "free_port",
    "new_bucket",
    "s3_env",
]

SHA256_NAME = re.compile(r"^[0-9a-f]{64}$")
# What a writer names its in-flight files: tmp/<pid>-<hex>.part, `.<name>.<pid>-<hex>` staging files and
# folders (views, markers, hf-cache blobs and links, refs), `.trash-<view>.<pid>-<hex>` folders.
STAGING_NAME = re.compile(r"^\..+\.\d+-[0-9a-f]+$")


def s3_client(endpoint: str) -> Any:
    from resolver.stores import S3Options, make_s3_client

    return make_s3_client(S3Options(endpoint_url=endpoint, addressing_style="path"))


def bucket_objects(endpoint: str, bucket: str, prefix: str = "") -> dict[str, int]:
    """key -> size of every object in the bucket (paginated)."""
    client = s3_client(endpoint)
    out: dict[str, int] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            out[item["Key"]] = int(item["Size"])
    return out


def long_requested() -> bool:
    """--reliability-long (or RELIABILITY_LONG=1), readable at import time (hypothesis settings are)."""
    return "--reliability-long" in sys.argv or os.environ.get("RELIABILITY_LONG", "") in ("1", "true", "yes")


# -- the CLI ------------------------------------------------------------------------------------------
def catalog_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "catalog", *args]


def cli_env(extra: Mapping[str, str] | None = None, drop: Iterable[str] = ()) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in set(drop)}
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    env.update(extra or {})
    return env


def run_catalog(
    args: Sequence[str],
    env: Mapping[str, str],
    *,
    timeout: float = 300,
    cwd: Path | None = None,
    preexec_fn: Any = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        catalog_cmd(*args),
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(cwd) if cwd else None,
        preexec_fn=preexec_fn,
    )


def explain(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}"


# -- the cache, from the outside ----------------------------------------------------------------------
def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def blob_mismatches(cache_root: Path) -> list[str]:
    """Every file under blobs/ whose content does not hash to its name (or that is misnamed/misplaced)."""
    bad = []
    blobs = cache_root / "blobs"
    if not blobs.is_dir():
        return bad
    for path in sorted(blobs.rglob("*")):
        if path.is_dir():
            continue
        rel = path.relative_to(blobs).as_posix()
        name = path.name
        if path.is_symlink() or not SHA256_NAME.match(name) or rel != f"{name[:2]}/{name}":
            bad.append(f"{rel}: not a blob (stray file, link or temp)")
            continue
        got = sha256_file(path)
        if got != name:
            bad.append(f"{rel}: content hashes to {got}")
    hub = cache_root / "hub"
    if hub.is_dir():  # the hf-cache layout's blobs are named by sha256 too
        for path in sorted(hub.glob("models--*/blobs/*")):
            if SHA256_NAME.match(path.name) and path.is_file() and sha256_file(path) != path.name:
                bad.append(f"{path.relative_to(cache_root)}: content does not match its name")
    return bad


def leftover_temps(cache_root: Path) -> list[str]:
    """Files a writer leaves only while it runs: tmp/*, `.x.<pid>-<hex>` staging names, `.trash-*`."""
    found = []
    tmp = cache_root / "tmp"
    if tmp.is_dir():
        found += [f"tmp/{p.name}" for p in tmp.iterdir()]
    for path in sorted(cache_root.rglob("*")):
        rel = path.relative_to(cache_root).as_posix()
        if rel.startswith("tmp/"):
            continue
        if STAGING_NAME.match(path.name) or path.name.startswith(".trash-") or path.name.endswith(".part"):
            found.append(rel)
    return found


def files_under(root: Path) -> set[str]:
    """Every file and link below `root`, as relative paths (what a test compares before and after)."""
    if not root.exists():
        return set()
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def check_view_files(resolution: Mapping[str, Any], manifest: Any) -> list[str]:
    """Every local file a `resolve --format json` result lists hashes to the manifest's pin."""
    bad = []
    pins = {f.path: f for f in manifest.files}
    root = Path(resolution["path"])
    for rel in resolution["files"]:
        entry = pins.get(rel)
        path = root / rel
        if entry is None:
            bad.append(f"{manifest.name}/{rel}: not pinned by the manifest")
        elif not path.is_file():
            bad.append(f"{manifest.name}/{rel}: missing at {path}")
        elif path.stat().st_size != entry.size or sha256_file(path) != entry.sha256:
            bad.append(f"{manifest.name}/{rel}: bytes differ from the pin")
    return bad


def parse_json_results(stdout: str) -> list[dict[str, Any]]:
    data = json.loads(stdout)
    return data if isinstance(data, list) else [data]


# -- generated catalogs ---------------------------------------------------------------------------------
def write_generated_catalog(
    work: Path, bucket: str, models: int, files: int = 3, unit: int = 4096, prefix: str = "model"
) -> tuple[Path, Path, list[str]]:
    """`models` small safetensors models (config.json + weights) with manifests pinning them, under
    work/manifests and work/data/<name>/ (the layout bench/sync_noop.py uses). Returns (manifests, data, names)."""
    manifests, data = work / "manifests", work / "data"
    manifests.mkdir(parents=True)
    (manifests / "catalog.yaml").write_text(
        f"store: s3://{bucket}/\ndefault_gpu: cpu\ngpu_classes:\n  cpu: {{memory_gib: 16}}\n"
    )
    names = []
    for i in range(models):
        name = f"{prefix}-{i:03d}"
        names.append(name)
        rev = hashlib.sha1(name.encode()).hexdigest()
        folder = data / name
        folder.mkdir(parents=True)
        entries = []
        for j in range(files):
            path = "config.json" if j == 0 else f"model-{j:05d}-of-{files - 1:05d}.safetensors"
            seed = hashlib.sha256(f"{name}/{j}".encode()).digest()
            blob = seed * (unit * (j + 1) // 32) if j else json.dumps({"model_type": "llama", "name": name}).encode()
            (folder / path).write_bytes(blob)
            entries.append(f"  - path: {path}\n    size: {len(blob)}\n    sha256: {hashlib.sha256(blob).hexdigest()}\n")
        (manifests / f"{name}.yaml").write_text(
            f"name: {name}\nsource:\n  hf_repo: org/{name}\n  revision: {rev}\ns3_prefix: s3://{bucket}/{name}/\n"
            f"load_format: safetensors\nfiles:\n{''.join(entries)}"
        )
    return manifests, data, names


def upload_generated(manifests: Path, data: Path, names: Sequence[str], store_url: str, workers: int = 8) -> None:
    """Upload every generated model with resolver.upload.upload_from_dir (verified first), in parallel."""
    from concurrent.futures import ThreadPoolExecutor

    import catalog
    from resolver.stores import open_store
    from resolver.upload import upload_from_dir

    cat = catalog.load(manifests)
    store = open_store(store_url)
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda n: upload_from_dir(cat, n, data / n, store), names))
