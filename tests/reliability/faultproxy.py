"""An HTTP-level fault proxy on 127.0.0.1, in front of the S3 server (SeaweedFS).

tests/servers.py's FaultProxy works on raw TCP bytes (cut a response after N bytes, refuse connections).
Some faults need to understand HTTP: answer 500 and then pass through, stall before the status line,
announce a Content-Length and send fewer bytes, reset a connection (RST, not FIN) mid-body, stall in
the middle of a body. This proxy parses each request, forwards it to the S3 server with http.client,
and then either relays the real response or breaks it in one of those ways. Everything it relays is
SeaweedFS's real answer: nothing about S3 is simulated.

It is bounded: stalls end when the proxy closes, every fault has a count, and it listens on loopback only.
"""

from __future__ import annotations

import http.client
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "expect",
}
KINDS = ("status", "stall", "short", "inflate", "reset", "stall_body", "flip")


@dataclass
class Fault:
    """Break the next `times` requests that match `method` and contain `path_contains` in their path.

    kind:
      status      answer `status` with an S3 error body instead of forwarding
      stall       wait `seconds` before answering (then relay the real answer, if anyone still listens)
      short       announce the real Content-Length, send only `after` body bytes, close (a lying length)
      inflate     announce `after` more bytes than the body has, send the body, close
      reset       send `after` body bytes, then reset the connection (RST)
      stall_body  send `after` body bytes, wait `seconds`, close
      flip        relay the real answer with the body byte at `after` inverted (same length, same ETag: a store
                  that serves other bytes than it lists, or a bit flipped on the way)
    """

    kind: str
    times: int = 1
    method: str = "GET"
    path_contains: str = ""
    status: int = 500
    after: int = 0
    seconds: float = 0.0
    served: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    proxy: HttpFaultProxy  # set on the subclass made per proxy

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.proxy._handle(self)

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET


class HttpFaultProxy:
    def __init__(self, target_url: str) -> None:
        parts = urlsplit(target_url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.faults: list[Fault] = []
        self.requests: Counter[str] = Counter()  # "GET /bucket/key" -> count
        self.lock = threading.Lock()
        self.closing = threading.Event()
        handler = type("Handler", (_Handler,), {"proxy": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def add(self, fault: Fault) -> Fault:
        with self.lock:
            self.faults.append(fault)
        return fault

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> HttpFaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def count(self, method: str, path_contains: str) -> int:
        with self.lock:
            return sum(n for k, n in self.requests.items() if k.startswith(method + " ") and path_contains in k)

    # -- serving ----------------------------------------------------------------------------------------
    def _take(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.times > 0 and fault.method == method and fault.path_contains in path:
                    fault.times -= 1
                    fault.served += 1
                    return fault
        return None

    @staticmethod
    def _read_body(h: BaseHTTPRequestHandler) -> bytes:
        length = h.headers.get("Content-Length")
        if length is not None:
            return h.rfile.read(int(length))
        if "chunked" in h.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(h.rfile.read(size))
                h.rfile.readline()
            return b"".join(chunks)
        return b""

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        body = self._read_body(h)
        path = h.path.split("?", 1)[0]
        with self.lock:
            self.requests[f"{h.command} {path}"] += 1
        fault = self._take(h.command, path)
        if fault is not None and fault.kind == "status":
            error = (
                f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
                f"<Message>injected {fault.status}</Message></Error>"
            ).encode()
            h.send_response_only(fault.status)
            h.send_header("Content-Type", "application/xml")
            h.send_header("Content-Length", str(len(error)))
            h.end_headers()
            if h.command != "HEAD":
                h.wfile.write(error)
            return
        if fault is not None and fault.kind == "stall":
            if self.closing.wait(fault.seconds):
                h.close_connection = True
                return
        status, reason, headers, data = self._forward(h, body)
        if status is None:
            h.close_connection = True
            return
        announced = len(data)
        if h.command == "HEAD":
            announced = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
        if fault is not None and fault.kind == "inflate":
            announced += fault.after
        h.send_response_only(status, reason)
        for key, value in headers:
            if key.lower() not in HOP_BY_HOP:
                h.send_header(key, value)
        h.send_header("Content-Length", str(announced))
        h.end_headers()
        if h.command == "HEAD":
            return
        if fault is not None and fault.kind == "flip" and fault.after < len(data):
            data = data[: fault.after] + bytes([data[fault.after] ^ 0xFF]) + data[fault.after + 1 :]
        if fault is None or fault.kind in ("stall", "flip"):
            h.wfile.write(data)
            return
        if fault.kind == "inflate":
            h.wfile.write(data)
        else:
            h.wfile.write(data[: fault.after])
        h.wfile.flush()
        if fault.kind == "stall_body":
            self.closing.wait(fault.seconds)
        if fault.kind == "reset":
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.connection.close()  # SO_LINGER 0: the peer gets a RST, not a FIN
        h.close_connection = True

    def _forward(self, h: BaseHTTPRequestHandler, body: bytes) -> tuple[int | None, str, list[tuple[str, str]], bytes]:
        upstream = http.client.HTTPConnection(*self.target, timeout=120)
        try:
            headers = {k: v for k, v in h.headers.items() if k.lower() not in HOP_BY_HOP}
            if body or h.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            upstream.request(h.command, h.path, body=body if body else None, headers=headers)
            response = upstream.getresponse()
            data = response.read() if h.command != "HEAD" else b""
            return response.status, response.reason, list(response.getheaders()), data
        except OSError:
            return None, "", [], b""
        finally:
            upstream.close()
