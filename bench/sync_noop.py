"""Benchmark: `catalog sync` on SeaweedFS against `s5cmd sync` / `aws s3 sync` (no-op) and `s5cmd cp` (upload).

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python bench/sync_noop.py noop   [--runs 7] [--models 200] [--files 3]
    .venv/bin/python bench/sync_noop.py upload [--runs 7] [--files 4] [--file-mib 256]
    ... [--pin]   # the server on core 0 (every thread), each tool on core 1: CPU and wall time without the other's

noop: 200 generated models (3 files each) already in the bucket; every tool syncs the same folder again. The
catalog runs three ways: a call it recorded (answered by catalog_app/warm_sync.py after the same listing), the full
CLI on the same runner (its recorded call removed before each run), and a fresh runner (no sync states cached).
A last row times the full CLI's floor (the interpreter, click, PyYAML and pydantic to its first model; no sync).
Requests are counted once per tool by a loopback proxy in front of the server (tests/servers.py), the
same way for every tool; the timed runs go straight to the server. Both tables give the server's CPU per run.
upload: a 1 GiB model (4 x 256 MiB + config.json) into an empty bucket, each run a fresh bucket (dropped
after the run, untimed). `catalog sync` hashes every file against the manifest before it uploads it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_one_model_catalog
from seaweed import (
    ROOT,
    Tool,
    aws,
    catalog,
    conditions,
    drop_bucket,
    machine,
    measure,
    rounds,
    s5cmd,
    start_server,
    table,
)

sys.path.insert(0, str(ROOT / "tests"))
from reliability.support import write_generated_catalog
from servers import FaultProxy, s3_env

BUCKET = "bench-sync"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["noop", "upload"])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--files", type=int, default=None)
    parser.add_argument("--file-mib", type=int, default=256)
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the server on one core (every thread), each measured tool on the other (taskset)",
    )
    args = parser.parse_args()
    server, env = start_server(pin=args.pin)
    server_pid = server.process.pid if server.process else None  # its CPU is a column: it shares the cores
    work = Path(tempfile.mkdtemp(prefix="catalog-sync-bench-"))
    try:
        if args.what == "noop":
            noop(args, server.url, server.port, env, work, server_pid)
        else:
            upload(args, server.url, env, work, server_pid)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def noop(
    args: argparse.Namespace, endpoint: str, port: int, env: dict[str, str], work: Path, server_pid: int | None
) -> None:
    files = args.files or 3
    manifests, data, _ = write_generated_catalog(work, BUCKET, args.models, files)
    s5 = s5cmd()
    subprocess.run([s5, "mb", f"s3://{BUCKET}"], env=env, check=True, capture_output=True)
    sync = [*catalog(), "--catalog", str(manifests), "sync", "--from-dir", str(data)]
    cenv = {**env, "CATALOG_CACHE": str(work / "cache")}
    subprocess.run(sync, env=cenv, check=True, capture_output=True)  # the real upload; this runner synced before
    full_cache = work / "cache-full"  # the same sync states, and never a recorded no-op call (reset removes it)
    shutil.copytree(work / "cache", full_cache)
    subprocess.run(sync, env=cenv, check=True, capture_output=True)  # a no-op: recorded for the warm path
    fresh = work / "fresh"
    tools = [
        Tool("catalog sync, runner that synced before (answered warm)", sync, cenv),
        Tool("catalog sync, runner that synced before (full CLI)", sync, {**env, "CATALOG_CACHE": str(full_cache)}),
        Tool("catalog sync (fresh runner)", sync, {**env, "CATALOG_CACHE": str(fresh)}),
        Tool("s5cmd sync", [s5, "sync", str(data) + "/", f"s3://{BUCKET}/"], env),
    ]
    aws_cli = aws()
    if aws_cli:
        tools.append(
            Tool("aws s3 sync", [aws_cli, "s3", "sync", "--only-show-errors", str(data), f"s3://{BUCKET}/"], env)
        )
    for tool in tools[3:]:
        measure(tool.argv(0), tool.env)  # the peers' own first pass (they may re-copy what another tool wrote)

    def reset() -> None:
        shutil.rmtree(fresh, ignore_errors=True)
        for entry in (full_cache / "warm-index").glob("sync-*.json"):
            entry.unlink()

    # The floor of any full CLI call: the interpreter, click, PyYAML and pydantic up to its first model (what validating
    # a manifest needs before a byte is read), plugins off as the CLI has them. Not a sync: no request, no listing.
    floor = Tool(
        "python -c 'import click, yaml, pydantic' + one model (the full CLI's floor)",
        [sys.executable, "-c", "import click, yaml\nfrom pydantic import BaseModel\nclass M(BaseModel):\n    x: int"],
        {**env, "PYDANTIC_DISABLE_PLUGINS": "__all__"},
    )
    loads = rounds([*tools, floor], args.runs, reset=reset, server_pid=server_pid, pin=args.pin)
    proxy = FaultProxy(port)
    counts = {}
    try:
        for tool in tools:
            reset()
            penv = {**(tool.env or env), **s3_env(proxy.url), "S3_ENDPOINT_URL": proxy.url}
            argv = [a if a != endpoint else proxy.url for a in tool.argv(0)]
            if tool is tools[0]:
                measure(argv, penv)  # recorded under the proxy's endpoint first: the count below is the warm answer's
            proxy.requests.clear()
            measure(argv, penv)
            counts[tool.label] = sum(proxy.requests.values())
    finally:
        proxy.close()
    print(
        f"machine: {machine()}\nno-op sync of {args.models} models x {files} files on SeaweedFS, {args.runs} rounds\n"
        f"{conditions(loads, args.pin)}\n"
    )
    print(table([*tools, floor], "s5cmd sync", "no-op sync"))
    print("\nrequests (one run each, through a counting proxy):")
    for label, count in counts.items():
        print(f"  {label:<44} {count:5d}  ({count / args.models:.3f} per model)")


def upload(args: argparse.Namespace, endpoint: str, env: dict[str, str], work: Path, server_pid: int | None) -> None:
    from resolve_cold import NAME, PREFIX, make_big

    files = args.files or 4
    source = work / "data" / NAME  # `sync --from-dir DIR` reads DIR/<model name>/
    entries = make_big(source, files, args.file_mib)
    manifests = write_one_model_catalog(
        work,
        name=NAME,
        bucket="bench-upload",
        prefix=PREFIX,
        revision="b" * 40,
        load_format="safetensors",
        entries=entries,
    )
    s5 = s5cmd()
    cache = work / "cache"

    def bucket(round_: int, tool: str) -> str:
        return f"bench-up-{tool}-{round_}"

    tools = [
        Tool(
            "catalog sync --from-dir (hashes, then uploads)",
            lambda r: [
                *catalog(),
                "--catalog",
                str(manifests),
                "sync",
                "--from-dir",
                str(source.parent),
                "--store",
                f"s3://{bucket(r, 'c')}/",
            ],
            {**env, "CATALOG_CACHE": str(cache)},
        ),
        Tool("s5cmd cp", lambda r: [s5, "cp", str(source) + "/", f"s3://{bucket(r, 's')}/{PREFIX}"], env),
    ]

    def reset() -> None:
        shutil.rmtree(cache, ignore_errors=True)

    created: list[str] = []

    def make_buckets() -> None:
        for r in range(args.runs):
            for t in ("c", "s"):
                subprocess.run([s5, "mb", f"s3://{bucket(r, t)}"], env=env, check=True, capture_output=True)
                created.append(bucket(r, t))

    def after(tool: Tool, round_: int) -> None:
        drop_bucket(endpoint, bucket(round_, "c" if tool is tools[0] else "s"))

    make_buckets()
    loads = rounds(tools, args.runs, reset, after, server_pid=server_pid, pin=args.pin)
    total = sum(s for _, s, _ in entries)
    print(
        f"machine: {machine()}\nupload of {len(entries)} files, {total / 2**20:.0f} MiB to SeaweedFS, {args.runs} rounds\n"
        f"{conditions(loads, args.pin)}\n"
    )
    print(table(tools, "s5cmd cp", "upload (defaults)"))


if __name__ == "__main__":
    main()
