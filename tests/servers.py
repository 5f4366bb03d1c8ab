"""Real servers for tests, all on 127.0.0.1: moto's S3 server, and a fault-injecting TCP proxy.

The proxy sits between boto3 and moto and can cut a response after N bytes, or refuse connections
for a while (a server that died and came back); it counts requests per path. It forwards real
bytes between real components: nothing about S3 is simulated.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoServer:
    """`moto_server` in its own process (so its CPU work does not share our GIL)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> MotoServer:
        exe = Path(sys.executable).with_name("moto_server")
        command = [str(exe)] if exe.exists() else [sys.executable, "-m", "moto.server"]
        self.process = subprocess.Popen([*command, "-H", "127.0.0.1", "-p", str(self.port)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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

    def close(self) -> None:
        self.closed = True
        self.sock.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if time.monotonic() < self.down_until:
                client.close()
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
                            if self.cuts_left > 0 and self.cut_after is not None and self.cut_pattern in path and parts[0] == "GET":
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


def new_bucket(endpoint: str) -> str:
    """A fresh bucket with a unique name on the S3 server at `endpoint`."""
    from resolver.stores import S3Options, make_s3_client

    name = f"test-{uuid.uuid4().hex[:12]}"
    make_s3_client(S3Options(endpoint_url=endpoint, addressing_style="path")).create_bucket(Bucket=name)
    return name


def s3_env(endpoint: str) -> dict[str, str]:
    """Dummy credentials for the local server; never real ones."""
    return {
        "AWS_ACCESS_KEY_ID": "testing-key-id",
        "AWS_SECRET_ACCESS_KEY": "testing-secret-key",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_EC2_METADATA_DISABLED": "true",
    }

