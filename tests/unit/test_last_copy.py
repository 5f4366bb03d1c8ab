"""The last-copy guard's pure parts: only a proven `ok` frees a pin's objects; a record of version 1, whose `ok`
could be a gated repo's unchecked grant, is read with that entry `gated`."""

from __future__ import annotations

import json

from catalog.schema import Source
from resolver.last_copy import PinRecord, from_bytes, last_copies
from resolver.upstream import Finding, Upstream, classify, classify_grant

REV = "0123456789abcdef0123456789abcdef01234567"


def record(name: str, upstream: str, detail: str = "") -> PinRecord:
    return PinRecord(name, f"org/{name}", "model", REV, f"org/{name}/", upstream, detail, "2026-12-01T00:00:00Z")


def test_every_verdict_but_ok_protects_the_objects() -> None:
    records = {n: record(n, u.value) for n, u in (("a", Upstream.OK), *((u.value, u) for u in Upstream if u is not Upstream.OK))}
    keys = [f"org/{n}/config.json" for n in records]
    assert set(last_copies(keys, records, ())) == set(records) - {"a"}
    assert "gated" not in last_copies(keys, records, ("gated",))  # named in --allow-last-copy-deletion


def test_a_version_1_ok_whose_grant_was_never_checked_is_read_as_gated() -> None:
    pins = {"a": {"hf_repo": "org/a", "repo_type": "model", "revision": REV, "prefix": "org/a/", "upstream": "ok",
                  "detail": "gated (manual); whether this token was granted access was not checked",
                  "checked_at": "2026-12-01T00:00:00Z", "gone_since": None},
            "b": {"hf_repo": "org/b", "repo_type": "model", "revision": REV, "prefix": "org/b/", "upstream": "ok",
                  "detail": "the pinned commit resolves", "checked_at": "2026-12-01T00:00:00Z", "gone_since": None}}
    read = from_bytes(json.dumps({"version": 1, "audited_at": "x", "pins": pins}).encode())
    assert read["a"].upstream == "gated" and read["b"].upstream == "ok"


def test_a_gated_repo_is_ok_only_when_the_head_of_a_pinned_file_succeeds() -> None:
    source = Source(hf_repo="org/a", revision=REV)
    gated = classify(200, {}, {"sha": REV, "gated": "manual"}, source, authenticated=True)
    assert gated.upstream is Upstream.GATED and gated.grant_unproven
    assert classify(200, {}, {"sha": REV, "gated": "manual"}, source, authenticated=False).grant_unproven is False
    assert classify_grant(200, gated, "config.json").upstream is Upstream.OK
    assert classify_grant(302, gated, "model.safetensors").upstream is Upstream.OK  # an LFS file: its CDN
    assert classify_grant(401, gated, "config.json") == Finding(
        Upstream.GATED, "gated (manual): this token is not granted access (401 on HEAD config.json)")
    assert classify_grant(503, gated, "config.json").upstream is Upstream.UNREACHABLE
    assert classify_grant("ConnectError", gated, "config.json").upstream is Upstream.UNREACHABLE
