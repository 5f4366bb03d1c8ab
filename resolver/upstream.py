"""`catalog audit-upstream`: is each pin still where it came from?

One metadata request per pin (`GET /api/{models,datasets}/<repo>/revision/<commit>`, redirects not
followed), classed by `classify` (pure) from the status, the Hub's `X-Error-Code` and the body:

    ok             the commit resolves and its files can be fetched (for a gated repo: proven, see below)
    deleted        404 RepoNotFound (to a caller with a token, a repo made private to others looks the same)
    private        401/403 RepoNotFound or access denied (to an anonymous caller, a deleted repo looks the same)
    gated          401/403 GatedRepo, or the metadata says `gated` and this token's access to its files is not proven
    revision-gone  404 RevisionNotFound: the repo is there, the pinned commit no longer is
    moved          a redirect: the repo id was renamed (the new id is named)
    unreachable    the Hub failing (5xx, a connection error, rate limits past the wait, an answer that is not
                   the Hub's): never taken for a deletion

A gated repo's metadata answers any token, granted or not, so `ok` there needs proof: one authenticated HEAD of a
pinned file (the smallest), which succeeds only for a token granted access; a 401/403 keeps it `gated`, anything else
makes it `unreachable`. Nothing but `ok` is recoverable: deleted, private, gated and revision-gone mean the bucket
may hold the last copy (`GONE`), and an unproven verdict (`moved`, `unreachable`) may as well; what sync must not
delete without being told (`resolver/last_copy.py` records the result and guards deletions). Rate
limits are honoured as `catalog lock` honours them (`resolver/hub.py`): a reset within CATALOG_HUB_MAX_WAIT
is waited out; a later one stops the audit, and the pins not yet asked are reported unreachable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any
from urllib.parse import quote, urlparse

from catalog.schema import ModelManifest, Source
from resolver.hub import HubOptions, RateLimitedError, api_get

log = logging.getLogger(__name__)


class Upstream(str, Enum):
    OK = "ok"
    DELETED = "deleted"
    GATED = "gated"
    PRIVATE = "private"
    REVISION_GONE = "revision-gone"
    MOVED = "moved"
    UNREACHABLE = "unreachable"


GONE = frozenset({Upstream.DELETED, Upstream.GATED, Upstream.PRIVATE, Upstream.REVISION_GONE})
_REDIRECTS = (301, 302, 303, 307, 308)
_INVALID_TOKEN = "Invalid credentials in Authorization header"  # huggingface_hub's own test for a refused token


@dataclass(frozen=True)
class Finding:
    upstream: Upstream
    detail: str
    grant_unproven: bool = False  # gated, with a token whose access to the files one HEAD must prove


Pin = tuple[str, Source, str, str | None]  # model name, source, prefix key in the store, a pinned file to HEAD


def probe_file(manifest: ModelManifest) -> str | None:
    """The pinned file whose HEAD proves a token's grant: the smallest (a small file is served without a redirect)."""
    return min(manifest.files, key=lambda f: (f.size, f.path)).path if manifest.files else None


@dataclass(frozen=True)
class PinAudit:
    """One model's pin and what the Hub said about it."""

    name: str
    source: Source
    prefix: str  # the model's prefix key in the store: what the last-copy guard protects
    finding: Finding

    @property
    def ok(self) -> bool:
        return self.finding.upstream is Upstream.OK


def _header(headers: Mapping[str, str], name: str) -> str:
    return next((str(v) for k, v in headers.items() if k.lower() == name.lower()), "")


def _moved_to(location: str, repo_type: str) -> str | None:
    """The repo id a redirect of `/api/<type>s/<org>/<name>/revision/...` (or a download path) points at."""
    parts = [p for p in urlparse(location).path.split("/") if p]
    if parts[:2] == ["api", f"{repo_type}s"]:
        parts = parts[2:]
    elif parts[:1] == [f"{repo_type}s"]:
        parts = parts[1:]
    return "/".join(parts[:2]) if len(parts) >= 2 else None


def classify(status: int, headers: Mapping[str, str], body: Any, source: Source, *, authenticated: bool) -> Finding:
    """Pure: what one answer to the pin's metadata request says about its upstream."""
    code = _header(headers, "X-Error-Code")
    message = _header(headers, "X-Error-Message")
    if status == 200:
        sha = body.get("sha") if isinstance(body, dict) else None
        if sha is not None and sha != source.revision:
            return Finding(
                Upstream.UNREACHABLE,
                f"the Hub answered for commit {sha}, not {source.revision}; not its answer about this pin",
            )
        gated = body.get("gated") if isinstance(body, dict) else None
        if gated and not authenticated:
            return Finding(
                Upstream.GATED, f"gated ({gated}): its files need a token granted access, and none was given"
            )
        if gated:
            return Finding(Upstream.GATED, f"gated ({gated}): this token's access to its files is not proven", True)
        return Finding(Upstream.OK, "the pinned commit resolves")
    if status in _REDIRECTS:
        new = _moved_to(_header(headers, "Location"), source.repo_type)
        return Finding(
            Upstream.MOVED, f"renamed to {new}" if new else f"redirected ({status}) to {_header(headers, 'Location')}"
        )
    if status in (401, 403):
        if message == _INVALID_TOKEN:
            return Finding(
                Upstream.UNREACHABLE,
                f"the Hub refused the token ({status}): check HF_TOKEN; nothing was learned about the repo",
            )
        if code == "GatedRepo":
            return Finding(Upstream.GATED, f"gated ({status} GatedRepo): a token granted access is needed")
        if code == "RepoNotFound" and not authenticated:
            return Finding(
                Upstream.PRIVATE,
                f"private, or deleted ({status} RepoNotFound): the Hub answers anonymous callers alike; "
                "set HF_TOKEN to tell them apart",
            )
        return Finding(Upstream.PRIVATE, f"access denied ({status}{' ' + code if code else ''})")
    if status == 404 and code == "RevisionNotFound":
        return Finding(
            Upstream.REVISION_GONE,
            f"the repo is there, commit {source.revision[:12]} no longer resolves (404 RevisionNotFound)",
        )
    if status == 404 and code in ("RepoNotFound", ""):
        if code == "":
            # A 404 without the Hub's error code is a proxy's or a wrong endpoint's answer, not the Hub's word.
            return Finding(
                Upstream.UNREACHABLE,
                "404 without the Hub's X-Error-Code: not the Hub's answer about this repo; check HF_ENDPOINT",
            )
        return Finding(
            Upstream.DELETED, "deleted (404 RepoNotFound)" + (", or private to others" if authenticated else "")
        )
    if status == 404:
        return Finding(Upstream.DELETED, f"gone (404 {code})")
    return Finding(Upstream.UNREACHABLE, f"the Hub answered {status}")


def classify_grant(status: int | str, gated: Finding, path: str) -> Finding:
    """Pure: the verdict on a gated pin after the HEAD of its file `path` answered `status` (text: no answer came)."""
    said = gated.detail.split(":", 1)[0]  # "gated (manual)"
    if isinstance(status, str):
        return Finding(Upstream.UNREACHABLE, f"{said}: proving this token's access failed ({status} on HEAD {path})")
    if status == 200 or status in _REDIRECTS:  # an LFS file redirects to its CDN: served
        return Finding(Upstream.OK, f"{said}; this token was granted access (HEAD {path}: {status})")
    if status in (401, 403):
        return Finding(Upstream.GATED, f"{said}: this token is not granted access ({status} on HEAD {path})")
    return Finding(
        Upstream.UNREACHABLE, f"{said}: the Hub answered {status} on HEAD {path}; this token's access is not proven"
    )


def metadata_url(source: Source, options: HubOptions) -> str:
    return f"{options.endpoint}/api/{source.repo_type}s/{source.hf_repo}/revision/{quote(source.revision, safe='')}"


def file_url(source: Source, path: str, options: HubOptions) -> str:
    kind = "" if source.repo_type == "model" else f"{source.repo_type}s/"
    return f"{options.endpoint}/{kind}{source.hf_repo}/resolve/{quote(source.revision, safe='')}/{quote(path)}"


def _ask(source: Source, probe: str | None, options: HubOptions, sleep: Callable[[float], None]) -> Finding:
    """The pin's one metadata request (again only after a 429/5xx or a dropped connection, as lock retries), and for
    a gated repo with a token one HEAD of the pinned file `probe`, the proof of the grant."""
    finding = _ask_metadata(source, options, sleep)
    if not finding.grant_unproven:
        return finding
    if probe is None:
        return Finding(Upstream.GATED, f"{finding.detail}: no pinned file to prove it with")
    what = f"proving access to {source.hf_repo}@{source.revision[:12]}"
    response = api_get(
        file_url(source, probe, options), None, what, options, sleep, follow_redirects=False, method="HEAD"
    )
    return classify_grant(response if isinstance(response, str) else response.status_code, finding, probe)


def _ask_metadata(source: Source, options: HubOptions, sleep: Callable[[float], None]) -> Finding:
    what = f"auditing {source.hf_repo}@{source.revision[:12]}"
    params = [("expand", "sha"), ("expand", "gated"), ("expand", "private")]
    response = api_get(metadata_url(source, options), params, what, options, sleep, follow_redirects=False)
    if isinstance(response, str):
        return Finding(Upstream.UNREACHABLE, f"{response} after {options.attempts} attempts at {options.endpoint}")
    status = response.status_code
    if status == 429 or status >= 500:
        return Finding(
            Upstream.UNREACHABLE, f"the Hub answered {status} after {options.attempts} attempts at {options.endpoint}"
        )
    try:
        body = response.json() if status == 200 else None
    except ValueError:
        return Finding(Upstream.UNREACHABLE, "the Hub's answer was not JSON")
    return classify(status, response.headers, body, source, authenticated=options.token is not None)


def audit(
    pins: Sequence[Pin],
    options: HubOptions,
    sleep: Callable[[float], None] = time.sleep,
    on_done: Callable[[PinAudit], None] | None = None,
) -> list[PinAudit]:
    """Ask the Hub about each (name, source, prefix, probe) once per distinct repo+revision; in the given order."""
    asked: dict[tuple[str, str, str], Finding] = {}
    stopped: Finding | None = None
    out = []
    for name, source, prefix, probe in pins:
        key = (source.repo_type, source.hf_repo.casefold(), source.revision)
        if key not in asked:
            if stopped is None:
                try:
                    asked[key] = _ask(source, probe, options, sleep)
                except RateLimitedError as exc:
                    stopped = Finding(Upstream.UNREACHABLE, f"not asked: {exc.message}")
                    asked[key] = stopped
            else:
                asked[key] = stopped
        result = PinAudit(name, source, prefix, asked[key])
        if on_done is not None:
            on_done(result)
        out.append(result)
    return out
