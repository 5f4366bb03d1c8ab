"""Benchmark: resolve many small generated models from moto's S3 server, in one `catalog resolve --all`
and in one `catalog resolve NAME` process per model (a bounded pool, as parallel CI jobs would), and
report throughput, peak memory and failures. Every resolved file is re-hashed against its pin.

    .venv/bin/python bench/load_resolve.py [--models 200] [--files 3] [--pool 8]

Peak memory is resource.getrusage(RUSAGE_CHILDREN).ru_maxrss: the largest resident set of any child
process waited for so far (the resolve processes; moto's server is counted only at the very end).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from reliability.support import (
    MotoServer,
    check_view_files,
    new_bucket,
    parse_json_results,
    s3_env,
    upload_generated,
    write_generated_catalog,
)


def children_maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--files", type=int, default=3)
    parser.add_argument("--pool", type=int, default=8)
    args = parser.parse_args()

    server = MotoServer().start()
    os.environ.update(s3_env(server.url))
    work = Path(tempfile.mkdtemp(prefix="catalog-load-bench-"))
    rows: list[tuple[str, float, int, int]] = []
    try:
        import catalog

        bucket = new_bucket(server.url)
        manifests, data, names = write_generated_catalog(work / "catalog", bucket, args.models, args.files)
        started = time.perf_counter()
        upload_generated(manifests, data, names, f"s3://{bucket}/")
        upload_s = time.perf_counter() - started
        cat = catalog.load(manifests)
        total_bytes = sum(m.total_bytes for m in cat)
        env = {**os.environ, "CATALOG_DIR": str(manifests), "HOME": str(work / "home"), "PYTHONDONTWRITEBYTECODE": "1"}

        def check(out: str) -> int:
            """How many resolved models have a file that does not hash to its pin (or a broken result)."""
            try:
                return sum(1 for r in parse_json_results(out) if check_view_files(r, cat.get(r["name"])))
            except ValueError:
                return 1

        # One process for everything.
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "catalog", "resolve", "--all", "--format", "json", "--cache", str(work / "all")],
            env=env,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - started
        failures = args.models if done.returncode != 0 else check(done.stdout)
        rows.append(
            (
                f"resolve --all (1 process, {args.models} models)",
                seconds,
                failures,
                len(parse_json_results(done.stdout)) if done.returncode == 0 else 0,
            )
        )
        maxrss_all = children_maxrss_mib()

        # One process per model, `pool` at a time, one shared cache.
        cache = work / "each"

        def one(name: str) -> tuple[int, str]:
            d = subprocess.run(
                [sys.executable, "-m", "catalog", "resolve", name, "--format", "json", "--cache", str(cache)],
                env=env,
                capture_output=True,
                text=True,
            )
            return d.returncode, d.stdout if d.returncode == 0 else d.stderr

        started = time.perf_counter()
        with ThreadPoolExecutor(args.pool) as pool:
            results = list(pool.map(one, names))
        seconds = time.perf_counter() - started
        failures = sum(1 for code, out in results if code != 0 or check(out))
        rows.append((f"resolve NAME ({args.models} processes, pool of {args.pool})", seconds, failures, len(results)))
        maxrss_each = children_maxrss_mib()

        # Warm: the same per-model processes again (nothing to download).
        started = time.perf_counter()
        with ThreadPoolExecutor(args.pool) as pool:
            warm = list(pool.map(one, names))
        seconds = time.perf_counter() - started
        rows.append(
            (
                f"resolve NAME warm ({args.models} processes, pool of {args.pool})",
                seconds,
                sum(1 for code, out in warm if code != 0 or check(out)),
                len(warm),
            )
        )
        first_error = next(
            (out.strip().splitlines()[-1] for code, out in results + warm if code != 0 and out.strip()), None
        )
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}"
    )
    print(
        f"{args.models} models x {args.files} files, {total_bytes / 1024 / 1024:.1f} MiB in all; upload {upload_s:.2f} s"
    )
    for label, seconds, failures, count in rows:
        print(
            f"  {label:<52} {seconds:7.2f} s  {count / seconds:7.1f} models/s  {total_bytes / seconds / 1024 / 1024:6.2f} MiB/s"
            f"  failures {failures}"
        )
    print(
        f"peak child RSS: resolve --all {maxrss_all:.0f} MiB; largest single resolve process (or moto) {maxrss_each:.0f} MiB"
    )
    if first_error:
        print(f"first failure: {first_error}")
    return 1 if any(f for _, _, f, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
