"""A real OCI registry for tests: Debian's `docker-registry` (the CNCF distribution registry, 2.8) on 127.0.0.1.

One process per test session, with its own storage folder and config file, on a free loopback port. Three
flavours, each its own process when a test asks for it: anonymous (the default), `htpasswd` basic auth, and the
registry token flow (`auth: token`) with a token server of the test's own (`TokenServer`: it checks a user's
password and signs a JWT that the registry verifies against a certificate in its config; nothing about the
registry is simulated). `RegistryDouble` stands in front of one and redirects blob HEADs and GETs to a second
host (`BlobHost`), as a registry on object storage does. `blob_file(digest)` is where the registry keeps a blob's bytes, so a test
can tamper with them and see what a client does when a registry serves other bytes under a digest.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from servers import _die_with_parent, free_port

REGISTRY_BINARY = "docker-registry"


def registry_binary() -> str:
    found = shutil.which(REGISTRY_BINARY) or (
        f"/usr/bin/{REGISTRY_BINARY}" if Path(f"/usr/bin/{REGISTRY_BINARY}").exists() else None
    )
    if found is None:
        raise RuntimeError("Debian's docker-registry is not installed (`python3 dev.py test` installs it, as root)")
    return found


def htpasswd_line(user: str, password: str) -> str:
    """One htpasswd line with a bcrypt hash (the only scheme the registry accepts)."""
    import bcrypt

    return f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n"


class RegistryServer:
    """`docker-registry serve CONFIG` in its own process group; storage, config and log under `root`."""

    START_TIMEOUT = 30.0

    def __init__(
        self,
        root: Path | None = None,
        *,
        users: dict[str, str] | None = None,
        token_realm: str | None = None,
        token_cert: Path | None = None,
    ) -> None:
        self.root = root if root is not None else Path(tempfile.mkdtemp(prefix="registry-"))
        self.storage = self.root / "storage"
        self.config = self.root / "config.yml"
        self.log_path = self.root / "registry.log"
        self.users = users
        self.token_realm = token_realm
        self.token_cert = token_cert
        self.process: subprocess.Popen[bytes] | None = None
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}"

    def _write_config(self) -> None:
        lines = [
            "version: 0.1",
            "log:",
            "  level: warn",
            "  accesslog:",
            "    disabled: true",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {self.storage}",
            "  delete:",
            "    enabled: true",
            "http:",
            f"  addr: {self.host}",
            f"  secret: {secrets.token_hex(16)}",
        ]
        if self.users is not None:
            htpasswd = self.root / "htpasswd"
            htpasswd.write_text("".join(htpasswd_line(u, p) for u, p in self.users.items()))
            lines += ["auth:", "  htpasswd:", "    realm: test-registry", f"    path: {htpasswd}"]
        elif self.token_realm is not None and self.token_cert is not None:
            lines += [
                "auth:",
                "  token:",
                f"    realm: {self.token_realm}",
                f"    service: {TokenServer.SERVICE}",
                f"    issuer: {TokenServer.ISSUER}",
                f"    rootcertbundle: {self.token_cert}",
            ]
        self.config.write_text("\n".join(lines) + "\n")

    def start(self) -> RegistryServer:
        for attempt in range(3):
            self.storage.mkdir(parents=True, exist_ok=True)
            self._write_config()
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen(
                    [registry_binary(), "serve", str(self.config)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.root,
                    start_new_session=True,
                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                    preexec_fn=_die_with_parent,
                )
            deadline = time.monotonic() + self.START_TIMEOUT
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    break
                try:
                    urllib.request.urlopen(self.url + "/v2/", timeout=1).close()
                    return self
                except urllib.error.HTTPError:
                    return self  # 401: it answers (auth configured)
                except OSError:
                    time.sleep(0.1)
            tail = self.log_tail()
            self.stop(remove=False)
            if "address already in use" not in tail or attempt == 2:
                raise RuntimeError(f"docker-registry did not start:\n{tail}")
            self.port = free_port()
            self.host = f"127.0.0.1:{self.port}"
            self.url = f"http://{self.host}"
        raise AssertionError("unreachable")

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def blob_file(self, digest: str) -> Path:
        """Where the registry's filesystem driver keeps the bytes of `digest` (sha256:<hex>)."""
        hexdigest = digest.split(":", 1)[1]
        return self.storage / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"

    def stop(self, remove: bool = True) -> None:
        process, self.process = self.process, None
        if process is not None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    process.wait(3)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenServer:
    """The registry token flow's auth server, loopback only: `GET /token?service=...&scope=...` with Basic
    credentials of `users` (or none, for anonymous pulls when `anonymous_pull`) answers a JWT (ES256, the
    signing certificate in its `x5c` header) granting the asked actions. The registry checks the signature
    against `cert` (its rootcertbundle), the issuer, the audience (its service) and the expiry."""

    SERVICE = "test-registry"
    ISSUER = "test-token-issuer"

    def __init__(self, root: Path, users: dict[str, str], *, anonymous_pull: bool = False) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.users = users
        self.anonymous_pull = anonymous_pull
        self.issued: list[dict[str, object]] = []  # every token's claims, for assertions
        self.requests: list[dict[str, str]] = []  # every token request's query and whether it had credentials
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test token signer")])
        now = datetime.datetime.now(datetime.timezone.utc)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.cert_path = root / "token-cert.pem"
        self.cert_path.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
        self._der = self._cert.public_bytes(serialization.Encoding.DER)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server._answer(self)

            def log_message(self, *args: object) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self._http.server_address[1])
        self.realm = f"http://127.0.0.1:{self.port}/token"
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def _user(self, header: str | None) -> str | None:
        if not header or not header.startswith("Basic "):
            return None
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        return user if self.users.get(user) == password else ""

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query)
        user = self._user(handler.headers.get("Authorization"))
        self.requests.append({"scope": " ".join(query.get("scope", [])), "authenticated": str(bool(user))})
        if user == "" or (user is None and not self.anonymous_pull):
            handler.send_response(401)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        access = []
        for scope in " ".join(query.get("scope", [])).split():
            kind, _, rest = scope.partition(":")
            repo, _, actions = rest.rpartition(":")
            granted = [a for a in actions.split(",") if user or a == "pull"]
            access.append({"type": kind, "name": repo, "actions": granted})
        now = int(time.time())
        claims = {
            "iss": self.ISSUER,
            "sub": user or "",
            "aud": query.get("service", [""])[0],
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": secrets.token_hex(8),
            "access": access,
        }
        self.issued.append(claims)
        body = json.dumps({"token": self._sign(claims), "expires_in": 300}).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _sign(self, claims: dict[str, object]) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        header = {"typ": "JWT", "alg": "ES256", "x5c": [base64.b64encode(self._der).decode()]}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        r, s = decode_dss_signature(self._key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signing_input}.{_b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()


class BlobHost:
    """The second host a registry double redirects blob HEADs and GETs to (another port: another origin), as a
    registry on object storage sends them to a bucket or a CDN: serves `/blobs/<digest>` from the registry's storage
    folder (ranges too), and records every request's method and headers and the body bytes it sent."""

    def __init__(self, registry: RegistryServer) -> None:
        self.registry = registry
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.sent = 0
        host = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                host._serve(self, head=False)

            def do_HEAD(self) -> None:
                host._serve(self, head=True)

            def log_message(self, *args: object) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.url = f"http://localhost:{self._http.server_address[1]}"
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def _serve(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        self.requests.append((h.command, h.path, {k.lower(): v for k, v in h.headers.items()}))
        digest = urllib.parse.urlsplit(h.path).path.rsplit("/", 1)[-1]
        try:
            data = self.registry.blob_file(digest).read_bytes()
        except (OSError, IndexError):
            h.send_response(404)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        start, end = 0, len(data)
        ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", h.headers.get("Range", ""))
        if ranged and not head:
            start, end = int(ranged.group(1)), int(ranged.group(2)) + 1 if ranged.group(2) else len(data)
            h.send_response(206)
            h.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        else:
            h.send_response(200)
        h.send_header("Content-Length", str(end - start))
        h.end_headers()
        if not head:
            h.wfile.write(data[start:end])
            self.sent += end - start

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()


class RegistryDouble:
    """A registry in front of a real one (`upstream`, a RegistryServer): every request is forwarded as is, but a blob
    HEAD or GET the registry answers (200/206) is redirected (307) to `blobs` (a BlobHost), with a query as a signed
    URL would carry (`redirect_blobs`). With `referrers_api`, it adds what distribution 2.8 lacks, the OCI 1.1
    referrers API: a manifest pushed with a `subject` is answered with `OCI-Subject` and listed by
    `GET /v2/<name>/referrers/<digest>`. `requests` records what reached the double (method, path, headers)."""

    def __init__(self, upstream: RegistryServer, *, redirect_blobs: bool = True, referrers_api: bool = False) -> None:
        self.upstream = upstream
        self.blobs = BlobHost(upstream)
        self.redirect_blobs = redirect_blobs
        self.referrers_api = referrers_api
        self.referrers: dict[tuple[str, str], list[dict[str, object]]] = {}  # (repository, subject) -> descriptors
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                double._forward(self)

            do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = do_GET

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.host = f"127.0.0.1:{self._http.server_address[1]}"
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def _forward(self, h: BaseHTTPRequestHandler) -> None:
        import urllib3

        headers = {k: v for k, v in h.headers.items() if k.lower() not in ("connection", "keep-alive")}
        self.requests.append((h.command, h.path, {k.lower(): v for k, v in headers.items()}))
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        path = urllib.parse.urlsplit(h.path).path
        asked = re.fullmatch(r"/v2/(.+)/referrers/(sha256:[0-9a-f]{64})", path)
        if self.referrers_api and asked is not None and h.command == "GET":
            wanted = urllib.parse.parse_qs(urllib.parse.urlsplit(h.path).query).get("artifactType")
            listed = [
                d
                for d in self.referrers.get((asked.group(1), asked.group(2)), [])
                if not wanted or d.get("artifactType") in wanted
            ]
            index = json.dumps(
                {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": listed}
            ).encode()
            h.send_response(200)
            h.send_header("Content-Type", "application/vnd.oci.image.index.v1+json")
            h.send_header("Content-Length", str(len(index)))
            h.end_headers()
            h.wfile.write(index)
            return
        with urllib3.HTTPConnectionPool("127.0.0.1", self.upstream.port, retries=False, timeout=60) as upstream:
            answer = upstream.urlopen(
                h.command,
                h.path,
                body=body if body or h.command in ("PUT", "POST", "PATCH") else None,
                headers=headers,
                redirect=False,
            )
            data = answer.data
        extra: dict[str, str] = {}
        pushed = re.fullmatch(r"/v2/(.+)/manifests/[^/]+", path)
        if self.referrers_api and pushed is not None and h.command == "PUT" and answer.status == 201:
            manifest = json.loads(body)
            subject = manifest.get("subject") if isinstance(manifest, dict) else None
            if isinstance(subject, dict):
                import hashlib

                self.referrers.setdefault((pushed.group(1), subject["digest"]), []).append(
                    {
                        "mediaType": manifest.get("mediaType"),
                        "digest": "sha256:" + hashlib.sha256(body).hexdigest(),
                        "size": len(body),
                        "artifactType": manifest.get("artifactType"),
                    }
                )
                extra["OCI-Subject"] = subject["digest"]
        blob = re.fullmatch(r"/v2/.+/blobs/(sha256:[0-9a-f]{64})", path)
        if self.redirect_blobs and blob is not None and h.command in ("GET", "HEAD") and answer.status in (200, 206):
            h.send_response(307)
            h.send_header("Location", f"{self.blobs.url}/blobs/{blob.group(1)}?X-Amz-Signature=not-a-secret")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        h.send_response(answer.status)
        for key, value in answer.headers.items():
            if key.lower() not in ("connection", "keep-alive", "transfer-encoding", "content-length"):
                h.send_header(key, value)
        for key, value in extra.items():
            h.send_header(key, value)
        h.send_header(
            "Content-Length", answer.headers.get("Content-Length", "0") if h.command == "HEAD" else str(len(data))
        )
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self.blobs.close()
