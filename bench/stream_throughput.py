"""Benchmark: stream a ~256 MiB safetensors model from moto's S3 server with runai-model-streamer, against
`catalog resolve --materialize-weights` followed by a safetensors load of the cached files.

    .venv/bin/python bench/stream_throughput.py [--files 2] [--file-mib 128] [--runs 3]

Every path ends with every tensor in host memory. The streamer reads the bucket straight into its buffers
and checks nothing; it runs with its default 8 MiB ranges and with one range per file, because moto copies
the whole object for every ranged GET (a cost of the test server, not of S3), and once from the same files
on local disk for the streamer's own ceiling. The resolve path downloads into the cache hashing every byte
against the manifest (the CLI, process start included), then safetensors maps the files and every tensor is
copied out of the page cache. `check-load` is the streamer plus its checks (dtype and shape against each
header, sha256 of the streamed bytes against the pin). Each run starts from an empty cache; median of --runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from servers import MotoServer, s3_env

sys.path.insert(0, str(ROOT / "bench"))
from common import timed, write_one_model_catalog

MiB = 1024 * 1024
BUCKET = "bench-stream"
REVISION = "c" * 40
PREFIX = f"org/bench-stream/{REVISION}/"
TENSOR_MIB = 8  # float32 [2048, 1024]


def make_model(folder: Path, files: int, file_mib: int) -> list[tuple[str, int, str]]:
    """`files` safetensors shards of `file_mib` MiB (8 MiB float32 tensors), written without holding them in memory."""
    folder.mkdir(parents=True)
    entries = []
    per_file = file_mib // TENSOR_MIB
    block = os.urandom(TENSOR_MIB * MiB)
    for i in range(files):
        names = [f"model.layers.{i * per_file + j}.weight" for j in range(per_file)]
        header: dict[str, object] = {"__metadata__": {"format": "pt"}}
        for j, n in enumerate(names):
            header[n] = {
                "dtype": "F32",
                "shape": [2048, 1024],
                "data_offsets": [j * TENSOR_MIB * MiB, (j + 1) * TENSOR_MIB * MiB],
            }
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        path = folder / f"model-{i + 1:05d}-of-{files:05d}.safetensors"
        digest = hashlib.sha256()
        with open(path, "wb") as f:
            for chunk in [struct.pack("<Q", len(raw)) + raw] + [
                hashlib.sha256(n.encode()).digest()[:4] * 2 + block[8:]
                for n in names  # distinct tensors, finite-ish
            ]:
                f.write(chunk)
                digest.update(chunk)
        entries.append((path.name, path.stat().st_size, digest.hexdigest()))
    config = b'{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}\n'
    (folder / "config.json").write_bytes(config)
    entries.append(("config.json", len(config), hashlib.sha256(config).hexdigest()))
    return entries


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--file-mib", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    server = MotoServer().start()
    os.environ.update(s3_env(server.url))
    env = dict(os.environ)
    work = Path(tempfile.mkdtemp(prefix="catalog-bench-stream-"))
    try:
        import runai_model_streamer  # noqa: F401 - imported (and its C++ core loaded) before any timing
        from safetensors.torch import load_file

        import catalog
        from resolver.cache import Cache
        from resolver.loaders import LOCAL, StreamTarget, check_load, stream_safetensors, stream_target
        from resolver.stores import S3Options, make_s3_client, open_store

        source = work / "source"
        entries = make_model(source, args.files, args.file_mib)
        manifests = write_one_model_catalog(
            work,
            name="bench-stream",
            bucket=BUCKET,
            prefix=PREFIX,
            revision=REVISION,
            load_format="runai_streamer",
            entries=entries,
        )
        client = make_s3_client(S3Options(endpoint_url=server.url, addressing_style="path"))
        client.create_bucket(Bucket=BUCKET)
        for name, _, _ in entries:
            client.upload_file(str(source / name), BUCKET, PREFIX + name)
            client.get_object(Bucket=BUCKET, Key=PREFIX + name)["Body"].read()  # moto's first read is slower
        weights = [n for n, _, _ in entries if n.endswith(".safetensors")]
        total = sum(s for n, s, _ in entries if n.endswith(".safetensors"))
        cat = catalog.load(manifests)
        store = open_store(f"s3://{BUCKET}/")
        cache = work / "cache"

        def reset() -> None:
            shutil.rmtree(cache, ignore_errors=True)

        expected = args.files * (args.file_mib // TENSOR_MIB)

        def stream(uris: list[str], target: StreamTarget) -> None:
            tensors = stream_safetensors(uris, target)
            assert sum(len(t) for t in tensors) == expected  # all in the first dict: no headers given

        s3_uris = [f"s3://{BUCKET}/{PREFIX}{n}" for n in weights]
        s3_target = stream_target(store)
        # moto copies the whole object for every ranged GET; runai's default is one GET per 8 MiB block.
        one_range = dataclasses.replace(
            s3_target, env={**s3_target.env, "RUNAI_STREAMER_CHUNK_BYTESIZE": str(args.file_mib * MiB)}
        )

        resolve_cmd = [
            sys.executable,
            "-m",
            "catalog",
            "--catalog",
            str(manifests),
            "resolve",
            "bench-stream",
            "--materialize-weights",
            "--cache",
            str(cache),
        ]
        resolved: list[float] = []
        loaded: list[float] = []

        def resolve_then_load() -> None:
            started = time.perf_counter()
            out = subprocess.run(resolve_cmd, env=env, check=True, capture_output=True, text=True).stdout.strip()
            resolved.append(time.perf_counter() - started)
            started = time.perf_counter()
            tensors = [t.clone() for n in weights for t in load_file(str(Path(out) / n)).values()]  # into memory
            loaded.append(time.perf_counter() - started)
            assert len(tensors) == expected

        def checked() -> None:
            report = check_load(cat, "bench-stream", store=store, cache=Cache(cache))
            assert report.ok, report.problems

        results = {
            "runai-model-streamer, s3:// from moto (8 MiB ranges, its default)": timed(
                lambda: stream(s3_uris, s3_target), args.runs, reset
            ),
            f"runai-model-streamer, s3:// from moto ({args.file_mib} MiB ranges)": timed(
                lambda: stream(s3_uris, one_range), args.runs, reset
            ),
            "runai-model-streamer, the same files on local disk (no server)": timed(
                lambda: stream([str(source / n) for n in weights], LOCAL), args.runs, reset
            ),
            "catalog resolve --materialize-weights + safetensors load": timed(resolve_then_load, args.runs, reset),
            "check-load (streamer + dtype/shape/sha256 checks)": timed(checked, args.runs, reset),
        }
        rows = [(label, statistics.median(times)) for label, times in results.items()]
        rows.insert(4, ("  of which `catalog resolve` CLI (hashes every byte)", statistics.median(resolved)))
        rows.insert(5, ("  of which safetensors load_file + copy into memory", statistics.median(loaded)))
        print(
            f"stream_throughput: {args.files} x {args.file_mib} MiB safetensors ({total / MiB:.0f} MiB of weights) on "
            f"moto's S3 server on the same machine; median of {args.runs}"
        )
        print(
            f"{platform.machine()}, {os.cpu_count()} cores, CPython {platform.python_version()}, "
            f"runai-model-streamer {version('runai-model-streamer')}, torch {version('torch')}, "
            f"safetensors {version('safetensors')}, moto {version('moto')}; {datetime.date.today().isoformat()}"
        )
        print()
        print("| path | time | throughput |")
        print("|---|---|---|")
        for label, seconds in rows:
            print(f"| {label} | {seconds:.2f} s | {total / MiB / seconds:.0f} MiB/s |")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
