"""The Hub guard of the pytest plugin: every Hugging Face Hub request of a test session is refused before it leaves
the machine, and named.

How it covers every library and process: the guard is a small HTTP server on 127.0.0.1 owned by the session, and
HF_ENDPOINT (the one setting huggingface_hub, transformers, datasets and vLLM all take the Hub's address from) points
at it for the session and every process it starts: a test's subprocesses and the engine's worker processes inherit
it. A library that asks the Hub asks the guard, which answers 403 with a message huggingface_hub puts into the error it
raises ("403 Forbidden: model-catalog hub guard: ..."), and records the request against the test running at that
moment (tests run one at a time per process; with xdist each worker has its own guard). Offline libraries
(HF_HUB_OFFLINE=1, what `catalog resolve --layout hf-cache --format env` exports) never ask, so a warm runner
makes no request at all; a missing file then fails with the library's own offline error, and the plugin names the
pinned files the runner's HF cache lacks (`hf_cache_dir`, as huggingface_hub finds it); the preflight
(`pytest --catalog-preflight`) names them before any test runs.

Each request is judged against the catalog (pure: `judge`): which manifest pins the repo, at which revision, and
whether it pins the file, so the failure says what would fix it: the manifest line that pins the repo but not the
file, the pinned file this runner's cache lacks, or "no manifest pins REPO: `catalog add REPO`".

HF_ENDPOINT is written here (the only variable the guard sets) and put back when the session ends. A library
imported before the guard started keeps the address it read at import: its copy is set too (`_IMPORTED`).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from catalog import naming

if TYPE_CHECKING:
    from catalog.lookup import Catalog
    from catalog.schema import ModelManifest
    from catalog.yamlsource import Loc

# Where a library imported before the guard keeps its import-time copy of HF_ENDPOINT: module -> attribute -> template.
_IMPORTED = {
    "huggingface_hub.constants": {
        "ENDPOINT": "{}",
        "HUGGINGFACE_CO_URL_TEMPLATE": "{}/{{repo_id}}/resolve/{{revision}}/{{filename}}",
    },
    "datasets.config": {
        "HF_ENDPOINT": "{}",
        "HUB_DATASETS_URL": "{}/datasets/{{repo_id}}/resolve/{{revision}}/{{path}}",
    },
}
OUTSIDE = "(outside any test)"  # what a request is recorded against during collection or between tests
_KINDS = {"models": "model", "datasets": "dataset", "spaces": "space"}


@dataclass(frozen=True)
class HubAsk:
    """One request as the Hub would understand it."""

    method: str
    path: str
    kind: str  # "file" (a download or its HEAD), "metadata" (an API call about a repo), "other" (telemetry, whoami)
    repo_type: str = "model"
    repo: str | None = None
    revision: str | None = None  # None: the default branch
    file: str | None = None

    def describe(self) -> str:
        if self.repo is None:
            return f"{self.method} {self.path}"
        rev = self.revision or "main"
        what = self.file if self.kind == "file" else f"metadata ({self.path.split('?')[0]})"
        prefix = "datasets/" if self.repo_type == "dataset" else ""
        return f"{self.method} {prefix}{self.repo}@{rev[:12] if naming.check_revision(rev) is None else rev} {what}"


def parse_request(method: str, target: str) -> HubAsk:
    """Pure: what a request to the Hub's API asks (huggingface_hub's URL shapes: /{repo}/resolve/{rev}/{file},
    /datasets/{repo}/resolve/..., /api/{models|datasets}/{repo}[/revision|tree|paths-info/{rev}[/...]])."""
    raw = target.split("?", 1)[0]
    parts = [urllib.parse.unquote(p) for p in raw.split("/")[1:]]
    if "resolve" in parts[1:4] and parts[0] != "api":
        at = parts.index("resolve")
        kind_prefix = parts[0] if parts[0] in ("datasets", "spaces") and at > 1 else None
        repo_parts = parts[1:at] if kind_prefix else parts[:at]
        if 1 <= len(repo_parts) <= 2 and len(parts) > at + 2:
            return HubAsk(
                method,
                target,
                "file",
                _KINDS[kind_prefix] if kind_prefix else "model",
                "/".join(repo_parts),
                parts[at + 1],
                "/".join(parts[at + 2 :]),
            )
    if len(parts) >= 3 and parts[0] == "api" and parts[1] in _KINDS:
        rest = parts[2:]
        verbs = ("revision", "tree", "paths-info", "refs", "commits", "parquet", "treesize")
        at = next((i for i, p in enumerate(rest) if p in verbs and i in (1, 2)), len(rest))
        repo_parts = rest[:at]
        if 1 <= len(repo_parts) <= 2:
            revision = rest[at + 1] if at + 1 < len(rest) and rest[at] in ("revision", "tree", "paths-info") else None
            return HubAsk(method, target, "metadata", _KINDS[parts[1]], "/".join(repo_parts), revision)
    return HubAsk(method, target, "other")


@dataclass(frozen=True)
class Verdict:
    """What the catalog says about one request: one line, and the manifest (file:line) it points at, if any."""

    message: str
    manifest: str | None = None
    model: str | None = None
    rank: int = 3  # what to read first: 0 a pin this runner lacks, 1 nothing pins it, 2 a probe or metadata, 3 other


def judge(ask: HubAsk, cat: Catalog | None, where: Callable[[str, Loc], str]) -> Verdict:
    """Pure: why `ask` reached the Hub and what would fix it. `where(name, loc)` is the manifest's `file:line` of a key."""
    if ask.repo is None:
        return Verdict("not a request about a repo; set HF_HUB_OFFLINE=1 and HF_HUB_DISABLE_TELEMETRY=1 for the tests")
    pinning = [m for m in cat.by_repo(ask.repo) if m.source.repo_type == ask.repo_type] if cat is not None else []
    if not pinning:
        if ask.repo_type == "dataset":
            return Verdict(
                f"no manifest pins dataset {ask.repo}: pin it (a manifest with `source.repo_type: dataset`, "
                "then `catalog lock`)",
                rank=1,
            )
        return Verdict(f"no manifest pins {ask.repo}: `catalog add {ask.repo}`", rank=1)
    at_commit = naming.check_revision(ask.revision or "") is None
    chosen = _chosen(cat, ask, pinning) if cat is not None else None
    if chosen is None:
        first = pinning[0]
        return Verdict(
            f"{ask.repo}@{ask.revision} is not a pinned revision: {where(first.name, ('source', 'revision'))} "
            f"pins it at {first.source.revision}; load that revision (or its hf-cache snapshot)",
            where(first.name, ("source", "revision")),
            first.name,
            1,
        )
    name, rev = chosen.name, chosen.source.revision[:12]
    env_fix = f"`catalog resolve {name} --layout hf-cache --format env` exports the snapshot and HF_HUB_OFFLINE=1"
    if ask.kind != "file" or ask.file is None:
        loc = where(name, ("source", "hf_repo"))
        return Verdict(
            f"metadata of {ask.repo}@{ask.revision or 'main'} is pinned by {loc} ({name}), yet a library asked "
            f"the Hub for it (HF_HUB_OFFLINE is unset); {env_fix}",
            loc,
            name,
            2,
        )
    index = next((i for i, f in enumerate(chosen.files) if f.path == ask.file), None)
    if index is not None:
        loc = where(name, ("files", index, "path"))
        why_asked = (
            "this runner's HF cache lacks it"
            if at_commit
            else "HF_HUB_OFFLINE is unset, or this runner's HF cache lacks it"
        )
        return Verdict(
            f"{ask.file} is pinned at {loc} ({name}, {ask.repo}@{rev}) but was asked of the Hub: {why_asked}; "
            f"{env_fix}, or `pytest --catalog-prefetch` fetches it",
            loc,
            name,
            0,
        )
    from catalog.rules import dropped_by

    why = dropped_by(ask.file, chosen.source.include, chosen.source.exclude)
    if why is None:  # the selection takes every file of the repo: this one is not in it at the pin
        loc = where(name, ("source", "hf_repo"))
        return Verdict(
            f"{ask.file} is not a file of {ask.repo}@{rev} ({loc} pins every file its selection takes): a "
            "library probing for an optional file; with HF_HUB_OFFLINE=1 it looks in the cache only",
            loc,
            name,
            2,
        )
    loc = where(name, ("source", "exclude" if "exclude" in why else "include"))
    return Verdict(
        f"{loc} pins {ask.repo}@{rev} ({name}) but not {ask.file} ({why}): pin it (widen the selection, then "
        f"`catalog lock {name}`) or stop loading it",
        loc,
        name,
        1,
    )


def _chosen(cat: Catalog, ask: HubAsk, pinning: list[ModelManifest]) -> ModelManifest | None:
    """The manifest answering for the asked revision: the one pinning that commit (the primary among several), or for a
    branch the one answering for the repo id (as the hf-cache layout's refs/main does)."""
    if ask.revision is not None and naming.check_revision(ask.revision) is None:
        same = [m for m in pinning if m.source.revision == ask.revision]
        return next((m for m in same if m.primary), same[0] if same else None)
    owner = cat.repo_owner(ask.repo or "", repo_type=ask.repo_type)
    return owner if owner is not None else next((m for m in pinning if m.primary), pinning[0])


@dataclass(frozen=True)
class Finding:
    """A refused request, against the test that made it."""

    test: str
    ask: HubAsk
    verdict: Verdict

    def line(self) -> str:
        return f"{self.ask.describe()}: {self.verdict.message}"

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "method": self.ask.method,
            "path": self.ask.path,
            "kind": self.ask.kind,
            "repo_type": self.ask.repo_type,
            "repo": self.ask.repo,
            "revision": self.ask.revision,
            "file": self.ask.file,
            "message": self.verdict.message,
            "manifest": self.verdict.manifest,
            "model": self.verdict.model,
        }


GAP_RANK = 1.5  # a pinned file this runner's HF cache lacks: after what nothing pins, before metadata and probes


def failure_text(test: str, findings: Sequence[Finding], gaps: Sequence[str] = ()) -> str:
    """The failure of a test: what matters most first (a pinned file the test asked for and this runner lacks, what no
    manifest pins, the pinned files this runner's HF cache lacks, then metadata and probes), then every request the
    test made and its verdict, each once (with how many times it was asked)."""
    ordered = sorted(findings, key=lambda f: f.verdict.rank)
    first = min([(f.verdict.rank, f.line()) for f in ordered[:1]] + [(GAP_RANK, g) for g in gaps[:1]])[1]
    lines = [f"catalog hub guard: {first}"] + [f"  {gap}" for gap in gaps if gap != first]
    if findings:
        lines.append(
            f"{test} asked the Hub {len(findings)} time(s); each request was refused before it left the machine:"
        )
        counted: dict[str, int] = {}
        for f in ordered:
            counted[f.line()] = counted.get(f.line(), 0) + 1
        lines += [f"  {line}" + (f" ({n} times)" if n > 1 else "") for line, n in counted.items()]
    return "\n".join(lines)


def hf_cache_dir() -> Path:
    """The Hugging Face cache this process's libraries (and the processes it starts) read, as huggingface_hub finds
    it: HF_HUB_CACHE, else HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub."""
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


@dataclass
class HubGuard:
    """The guard's server and what it refused. `current` is the test running now (set by the plugin's hooks);
    `judge_request` turns a request into a Verdict (the plugin's, over the session's catalog)."""

    judge_request: Callable[[HubAsk], Verdict]
    current: str = OUTSIDE
    findings: list[Finding] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _reported: int = 0  # findings before this index were handed to a test already
    _previous: tuple[str | None, dict[str, dict[str, Any]]] = (None, {})

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> HubGuard:
        guard = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _refuse(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if 0 < length <= 1 << 20:
                    self.rfile.read(length)  # a POST body (paths-info): read, so the connection stays usable
                finding = guard.record(self.command, self.path)
                message = f"model-catalog hub guard ({finding.test}): {finding.verdict.message}"
                body = json.dumps({"error": message}).encode()
                self.send_response(403)
                self.send_header("X-Error-Message", message.encode("ascii", "replace").decode())
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="catalog-hub-guard", daemon=True).start()
        return self

    def record(self, method: str, target: str) -> Finding:
        ask = parse_request(method, target)
        try:
            verdict = self.judge_request(ask)
        except Exception as exc:  # noqa: BLE001 - the guard refuses whatever happens; the reason is said
            verdict = Verdict(f"refused (the catalog could not judge it: {type(exc).__name__}: {exc})")
        with self._lock:
            finding = Finding(self.current, ask, verdict)
            self.findings.append(finding)
        return finding

    def take(self, test: str) -> list[Finding]:
        """The findings of `test` not yet handed out."""
        with self._lock:
            new = [f for f in self.findings[self._reported :] if f.test == test]
            self._reported = len(self.findings)
        return new

    def of(self, test: str) -> list[Finding]:
        with self._lock:
            return [f for f in self.findings if f.test == test]

    def outside(self) -> list[Finding]:
        return self.of(OUTSIDE)

    def install(self) -> None:
        """HF_ENDPOINT -> the guard, for this process and every process it starts; the copies of libraries imported
        already, too. `uninstall` puts everything back."""
        copies: dict[str, dict[str, Any]] = {}
        for module, attributes in _IMPORTED.items():
            if (loaded := sys.modules.get(module)) is not None:
                copies[module] = {a: getattr(loaded, a) for a in attributes if hasattr(loaded, a)}
                for attribute, template in attributes.items():
                    setattr(loaded, attribute, template.format(self.url))
        self._previous = (os.environ.get("HF_ENDPOINT"), copies)
        os.environ["HF_ENDPOINT"] = self.url

    def uninstall(self) -> None:
        endpoint, copies = self._previous
        if os.environ.get("HF_ENDPOINT") == self.url:
            if endpoint is None:
                os.environ.pop("HF_ENDPOINT", None)
            else:
                os.environ["HF_ENDPOINT"] = endpoint
        for module, values in copies.items():
            if (loaded := sys.modules.get(module)) is not None:
                for attribute, value in values.items():
                    setattr(loaded, attribute, value)

    def close(self) -> None:
        self.uninstall()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
