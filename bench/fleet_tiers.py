"""Fleet: 6 runner processes, each with its own local cache, resolve one 1 GiB model cold, with and without a
shared cache tier (run by hand: `python bench/fleet_tiers.py [--size-mib 1024] [--runners 6]`).

The store is SeaweedFS (real S3) on loopback. Rows: no tier (every runner pulls from the store); a tier on
the same filesystem as the caches (filled once by `catalog publish`, then hard-linked: no copy, no store
request); a tier on another filesystem (/dev/shm: copied and hashed). Store bytes are what `resolve --format
json` says came from the store, summed over the runners (plus the publish, counted in its own row).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_one_model_catalog
from servers import SeaweedServer, new_bucket, s3_env

REV = "f1ee7" + "0" * 35
NAME = "fleet-model"


def make_model(folder: Path, size: int) -> list[tuple[str, int, str]]:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}\n')
    digest = hashlib.sha256()
    with open(folder / "model.safetensors", "wb") as f:
        chunk = os.urandom(64 * 1024 * 1024)
        for i in range(size // len(chunk)):
            block = chunk[:8] + i.to_bytes(8, "little") + chunk[16:]  # no two blocks alike
            f.write(block)
            digest.update(block)
    entries = [
        (
            "config.json",
            (folder / "config.json").stat().st_size,
            hashlib.sha256((folder / "config.json").read_bytes()).hexdigest(),
        ),
        ("model.safetensors", (folder / "model.safetensors").stat().st_size, digest.hexdigest()),
    ]
    return entries


def catalog(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "catalog", *args], env=env, capture_output=True, text=True, check=True)


def runners(count: int, manifests: Path, work: Path, env: dict[str, str], tier: Path | None) -> tuple[float, int]:
    """`count` cold resolves at once, each in its own cache: (wall seconds, bytes served by the store)."""
    extra = ["--shared-cache", str(tier)] if tier else []
    procs = []
    start = time.perf_counter()
    for i in range(count):
        cache = work / f"cache-{i}"
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "catalog",
                    "--catalog",
                    str(manifests),
                    "resolve",
                    NAME,
                    "--cache",
                    str(cache),
                    "--format",
                    "json",
                    *extra,
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outs = [p.communicate() for p in procs]
    wall = time.perf_counter() - start
    sizes = {}
    store_bytes = 0
    for (out, err), p in zip(outs, procs, strict=True):
        if p.returncode != 0:
            raise RuntimeError(err)
        answer = json.loads(out)
        for path, source in answer["sources"].items():
            sizes.setdefault(path, (Path(answer["path"]) / path).stat().st_size)
            if source.startswith("s3://"):
                store_bytes += sizes[path]
    return wall, store_bytes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--runners", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleet-", dir=os.environ.get("BENCH_TMP")) as tmp:
        work = Path(tmp)
        (work / "seaweed").mkdir()
        server = SeaweedServer(work / "seaweed").start()
        try:
            env = {**os.environ, **s3_env(server.url)}
            os.environ.update(s3_env(server.url))
            bucket = new_bucket(server.url)
            entries = make_model(work / "src", args.size_mib * 1024 * 1024)
            manifests = write_one_model_catalog(
                work,
                name=NAME,
                bucket=bucket,
                prefix=f"org/{NAME}/{REV}/",
                revision=REV,
                load_format="safetensors",
                entries=entries,
            )
            catalog(
                "--catalog",
                str(manifests),
                "sync",
                "--from-dir",
                str(work / "src"),
                "--cache",
                str(work / "sync-cache"),
                env=env,
            )
            total = sum(e[1] for e in entries)
            rows = []
            wall, fetched = runners(args.runners, manifests, work / "none", env, None)
            rows.append(("no tier", wall, fetched))
            for label, base in (
                ("tier, same filesystem (hard links)", work),
                ("tier, other filesystem (/dev/shm: copies)", Path("/dev/shm")),
            ):
                if not base.is_dir():
                    continue
                tier = Path(tempfile.mkdtemp(prefix="tier-", dir=base))
                try:
                    started = time.perf_counter()
                    catalog(
                        "--catalog",
                        str(manifests),
                        "publish",
                        NAME,
                        "--to",
                        str(tier),
                        "--cache",
                        str(work / "pub-cache"),
                        env=env,
                    )
                    published = time.perf_counter() - started
                    rows.append((f"publish into the {label.split(',')[1].strip()}", published, total))
                    subprocess.run(["chmod", "-R", "a-w", str(tier)], check=True)
                    wall, fetched = runners(args.runners, manifests, work / f"with-{len(rows)}", env, tier)
                    rows.append((label, wall, fetched))
                finally:
                    subprocess.run(["chmod", "-R", "u+w", str(tier)], check=False)
                    subprocess.run(["rm", "-rf", str(tier)], check=False)
                for i in range(args.runners):
                    subprocess.run(["rm", "-rf", str(work / f"with-{len(rows)}" / f"cache-{i}")], check=False)
        finally:
            server.stop()
    print(f"{args.runners} runners, one {args.size_mib} MiB model, separate local caches, SeaweedFS on loopback")
    print("| run | wall time | bytes from the store |")
    print("|---|---|---|")
    for label, wall, fetched in rows:
        print(f"| {label} | {wall:.1f} s | {fetched / 2**20:.0f} MiB |")


if __name__ == "__main__":
    main()
