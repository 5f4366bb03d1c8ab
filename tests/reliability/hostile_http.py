"""A real HTTP server on 127.0.0.1 that serves a folder the way a badly behaved mirror or endpoint would.

Modes (set `mode` any time):
- "serve": plain GETs with Range support (206), like nginx or SeaweedFS's filer.
- "ignore-range": always the whole file with 200, whatever Range asks.
- "status": `status` with `headers` (e.g. 503 with `Retry-After: 100000`), no body.
- "trickle": the right headers, then one byte every `interval` seconds.
- "script": `script(method, path, headers)` answers (status, headers, body), e.g. a registry's 401 or a token
  server's JSON; `trickle_headers` (or `trickle_body`) sends that answer from its first byte (or its body) one
  byte every `interval` seconds.

With `tls=(certfile, keyfile)` it serves https (`tls_files` makes a self-signed certificate for 127.0.0.1).

It counts the body bytes it sent and records every request's method, path and headers (what a host that
should never see credentials would receive). Nothing here imitates code under test: it is the other side
of a real socket.
"""

from __future__ import annotations

import re
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

Script = Callable[[str, str, dict[str, str]], tuple[int, dict[str, str], bytes]]


class HostileHttp:
    def __init__(self, root: Path | None = None, mode: str = "serve", *, tls: tuple[Path, Path] | None = None) -> None:
        self.root = root
        self.mode = mode
        self.status = 503
        self.headers: dict[str, str] = {}
        self.script: Script | None = None
        self.trickle_headers = False  # "script": the answer's status line and headers a byte every `interval`
        self.trickle_body = False  # "script": the headers at once, then the body a byte every `interval`
        self.interval = 0.5
        self.sent = 0  # body bytes sent
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.lock = threading.Lock()
        self.closed = threading.Event()
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                double._handle(self, head=False)

            def do_HEAD(self) -> None:
                double._handle(self, head=True)

            def do_PUT(self) -> None:
                double._handle(self, head=True)

            def do_POST(self) -> None:
                double._handle(self, head=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.closed.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> HostileHttp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _handle(self, h: BaseHTTPRequestHandler, *, head: bool) -> None:
        with self.lock:
            # Names lower-cased: HTTP's are case-insensitive, and clients differ (botocore "Authorization", hyper "authorization").
            self.requests.append((h.command, h.path, {k.lower(): v for k, v in h.headers.items()}))
        if self.mode == "script" and self.script is not None:
            self._scripted(h, head)
            return
        if self.mode == "status" or self.root is None:
            h.send_response(self.status)
            for key, value in self.headers.items():
                h.send_header(key, value)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        path = self.root / unquote(urlsplit(h.path).path).lstrip("/")
        if not path.is_file():
            h.send_response(404)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        data = path.read_bytes()
        start, end = 0, len(data)
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", h.headers.get("Range", ""))
        if match and self.mode != "ignore-range":
            start, end = int(match.group(1)), int(match.group(2)) + 1 if match.group(2) else len(data)
            h.send_response(206)
            h.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        else:
            h.send_response(200)
        h.send_header("Content-Length", str(end - start))
        h.send_header("ETag", f'"{len(data):x}"')
        h.end_headers()
        if head:
            return
        try:
            if self.mode == "trickle":
                for i in range(start, end):
                    if self.closed.wait(self.interval):
                        return
                    h.wfile.write(data[i : i + 1])
                    h.wfile.flush()
                    with self.lock:
                        self.sent += 1
                return
            if self.mode == "ignore-range" and _client_left(h, 0.2):
                return  # it read the headers and hung up: it never asked for this body
            for i in range(start, end, 256 * 1024):
                chunk = data[i : min(end, i + 256 * 1024)]
                h.wfile.write(chunk)
                with self.lock:
                    self.sent += len(chunk)
        except OSError:
            return  # the client went away (it gave up on us): fine

    def _scripted(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        if length:
            h.rfile.read(length)
        assert self.script is not None
        status, headers, body = self.script(h.command, h.path, {k.lower(): v for k, v in h.headers.items()})
        lines = [f"HTTP/1.1 {status} X\r\n"] + [f"{k}: {v}\r\n" for k, v in headers.items()]
        if not any(k.lower() == "content-length" for k in headers):
            lines.append(f"Content-Length: {len(body)}\r\n")
        start = ("".join(lines) + "\r\n").encode("latin-1")
        raw = start + (b"" if head else body)
        slow = 0 if self.trickle_headers else len(start) if self.trickle_body else len(raw)
        try:
            h.wfile.write(raw[:slow])
            h.wfile.flush()
            for i in range(slow, len(raw)):
                if self.closed.wait(self.interval):
                    return
                h.wfile.write(raw[i : i + 1])
                h.wfile.flush()
        except OSError:
            return


def tls_files(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files in `folder`); the certificate is its own CA."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    certificate, private = folder / "cert.pem", folder / "key.pem"
    certificate.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return certificate, private


def _client_left(h: BaseHTTPRequestHandler, seconds: float) -> bool:
    """The client closed its side within `seconds` (after reading the headers): no body is worth sending."""
    import select
    import socket

    h.wfile.flush()
    readable, _, _ = select.select([h.connection], [], [], seconds)
    if not readable:
        return False
    try:
        return h.connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def wait_until(predicate: object, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return True
        time.sleep(0.05)
    return False
