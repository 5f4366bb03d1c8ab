"""The pure decisions behind adopting CI's caches and surviving upstream loss: how a Hub answer is classed, how an
audit's record merges and guards deletions, how tier entries and repo lists are read."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from catalog.errors import UsageError
from catalog.schema import FileEntry, Source
from catalog.settings import Settings, split_tiers
from resolver.hf_tier import HfTier
from resolver.last_copy import LastCopyError, PinRecord, from_bytes, last_copies, merge, to_bytes
from resolver.repo_list import parse_repo_list
from resolver.tiers import Tier, tiers_of
from resolver.upstream import Finding, Upstream, classify, classify_grant

REV = "0123456789abcdef0123456789abcdef01234567"
SOURCE = Source(hf_repo="org/model", revision=REV)


def test_shared_cache_entries_keep_the_hf_prefix() -> None:
    assert split_tiers("/a:hf:/b/c::hf:~/d:") == ["/a", "hf:/b/c", "hf:~/d"]
    settings = Settings.build({"CATALOG_SHARED_CACHE": "hf:~/hub:/tier", "HOME": "/home/x"})
    home = Path("~").expanduser()
    assert settings.shared_caches == (Path(f"hf:{home}/hub"), Path("/tier"))
    kinds = tiers_of(settings.shared_caches)
    assert isinstance(kinds[0], HfTier) and kinds[0].root == home / "hub" and isinstance(kinds[1], Tier)
    flagged = Settings.build({}).with_flags(shared_caches=("hf:/x",))
    assert flagged.shared_caches == (Path("hf:/x"),)


def test_an_hf_tier_looks_in_the_pinned_snapshot_then_by_sha256(tmp_path: Path) -> None:
    entry = FileEntry(path="sub/model.safetensors", size=3, sha256="a" * 64)
    repo = tmp_path / "models--org--model"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / ("a" * 64)).write_bytes(b"abc")
    tier = HfTier(tmp_path)
    assert tier.candidates(entry, SOURCE) == [(repo / "blobs" / ("a" * 64)).resolve()]
    (repo / "blobs" / "1234").write_bytes(b"abc")
    link = repo / "snapshots" / REV / "sub" / "model.safetensors"
    link.parent.mkdir(parents=True)
    link.symlink_to("../../../blobs/1234")
    assert tier.candidates(entry, SOURCE) == [
        (repo / "blobs" / "1234").resolve(),
        (repo / "blobs" / ("a" * 64)).resolve(),
    ]
    assert tier.candidates(entry, None) == []  # without the manifest's revision it cannot look
    assert tier.candidates(FileEntry(path="../x", size=1, sha256="a" * 64), SOURCE) == []
    assert tier.candidates(entry, Source(hf_repo="org/model", revision="main")) == []


def test_a_repo_list_reads_revisions_and_classes_and_names_bad_lines() -> None:
    text = "# models\norg/a\norg/b@v1 --gpu l4   # tagged\norg/c@" + REV + " h200\norg/d --gpu=cpu\n"
    listed = parse_repo_list(text, "models.txt", ["cpu", "l4", "h200"])
    assert [(x.repo, x.ref, x.gpu, x.where) for x in listed] == [
        ("org/a", "main", None, "models.txt:2"),
        ("org/b", "v1", "l4", "models.txt:3"),
        ("org/c", REV, "h200", "models.txt:4"),
        ("org/d", "main", "cpu", "models.txt:5"),
    ]
    with pytest.raises(UsageError) as caught:
        parse_repo_list("org/a\nnoslash\norg/b x y\norg/a@main\norg/c --gpu tpu\n", "m.txt", ["cpu"])
    message = caught.value.message
    assert "4 bad line(s)" in message and "m.txt:2:" in message and "m.txt:3: expected" in message
    assert (
        "m.txt:4: org/a@main is listed again (first at m.txt:1)" in message
        and "m.txt:5: unknown GPU class 'tpu'" in message
    )


@pytest.mark.parametrize(
    ("status", "headers", "body", "token", "expected"),
    [
        (200, {}, {"sha": REV}, False, Upstream.OK),
        (200, {}, {"sha": REV, "gated": "manual"}, False, Upstream.GATED),
        (200, {}, {"sha": REV, "gated": "auto"}, True, Upstream.GATED),  # until one HEAD proves the token's grant
        (
            200,
            {},
            {"sha": "f" * 40},
            False,
            Upstream.UNREACHABLE,
        ),  # an answer about another commit is not about this pin
        (404, {"X-Error-Code": "RepoNotFound"}, None, False, Upstream.DELETED),
        (404, {"x-error-code": "RevisionNotFound"}, None, False, Upstream.REVISION_GONE),
        (
            404,
            {},
            None,
            False,
            Upstream.UNREACHABLE,
        ),  # no Hub error code: a proxy's or a wrong endpoint's 404, never "deleted"
        (401, {"X-Error-Code": "RepoNotFound"}, None, False, Upstream.PRIVATE),
        (401, {"X-Error-Code": "GatedRepo"}, None, False, Upstream.GATED),
        (403, {"X-Error-Code": "GatedRepo"}, None, True, Upstream.GATED),
        (403, {}, None, True, Upstream.PRIVATE),
        (401, {"X-Error-Message": "Invalid credentials in Authorization header"}, None, True, Upstream.UNREACHABLE),
        (307, {"Location": "/api/models/neworg/model/revision/" + REV}, None, False, Upstream.MOVED),
        (500, {}, None, False, Upstream.UNREACHABLE),
    ],
)
def test_classify(status: int, headers: dict[str, str], body: object, token: bool, expected: Upstream) -> None:
    assert classify(status, headers, body, SOURCE, authenticated=token).upstream is expected


def test_a_move_names_the_new_id() -> None:
    found = classify(
        308,
        {"Location": "https://hub.example/api/models/neworg/model/revision/" + REV},
        None,
        SOURCE,
        authenticated=False,
    )
    assert found.detail == "renamed to neworg/model"


def rec(
    name: str, upstream: str, at: str = "t1", since: str | None = None, revision: str = REV, prefix: str | None = None
) -> PinRecord:
    gone = upstream in ("deleted", "gated", "private", "revision-gone")
    return PinRecord(
        name,
        "org/model",
        "model",
        revision,
        prefix if prefix is not None else f"org/{name}/",
        upstream,
        "",
        at,
        since if since is not None else (at if gone else None),
    )


def test_merge_keeps_what_an_unreachable_hub_cannot_tell_and_the_first_date_of_a_loss() -> None:
    old = {
        "a": rec("a", "deleted", "t1"),
        "b": rec("b", "ok", "t1"),
        "gone-from-catalog": rec("gone-from-catalog", "deleted", "t0"),
    }
    new = merge(old, [rec("a", "unreachable", "t2"), rec("b", "gated", "t2"), rec("c", "unreachable", "t2")])
    assert new["a"] == old["a"]  # unreachable never replaces a known class
    assert new["b"].upstream == "gated" and new["b"].gone_since == "t2"
    assert new["c"].upstream == "unreachable"  # nothing known before: said as it is
    assert new["gone-from-catalog"] == old["gone-from-catalog"]  # never dropped: its orphans stay protected
    again = merge(new, [rec("b", "deleted", "t3")])
    assert again["b"].gone_since == "t2" and again["b"].checked_at == "t3"
    repinned = merge(again, [rec("b", "ok", "t4", revision="f" * 40, prefix="org/b-new/")])
    assert (
        repinned["b"].upstream == "ok" and repinned["b"].gone_since is None
    )  # another commit under the name starts afresh
    assert repinned[f"b@{REV[:12]}"] == replace(again["b"], name=f"b@{REV[:12]}")  # the old, gone pin stays protected
    assert last_copies(["org/b/x", "org/b-new/x"], repinned, []) == {f"b@{REV[:12]}": ["org/b/x"]}
    assert merge(again, [rec("b", "ok", "t5")])["b"].gone_since is None


def test_the_record_round_trips_and_an_unreadable_one_refuses() -> None:
    records = {"a": rec("a", "deleted"), "b": rec("b", "ok")}
    assert from_bytes(to_bytes(records, "t1")) == records
    for bad in (
        b"not json",
        b'{"version": 9, "pins": {}}',
        b'{"version": 1, "pins": {"a": {"prefix": 3}}}',
        b'{"version": 1, "pins": {"a": {"hf_repo": "o/m", "repo_type": "model", "revision": "r", "prefix": 1, '
        b'"upstream": "deleted", "detail": "", "checked_at": "t"}}}',
    ):
        with pytest.raises(UsageError, match="unreadable"):
            from_bytes(bad)


def test_last_copies_are_the_keys_under_a_prefix_not_proven_ok_and_not_allowed() -> None:
    records = {
        "a": rec("a", "deleted"),
        "b": rec("b", "ok"),
        "c": rec("c", "revision-gone"),
        "d": rec("d", "unreachable"),
    }
    keys = ["org/a/x", "org/a/y", "org/b/x", "org/c/x", "org/d/x", "org/other/x", "org/ab/x"]
    assert last_copies(keys, records, []) == {"a": ["org/a/x", "org/a/y"], "c": ["org/c/x"], "d": ["org/d/x"]}
    assert last_copies(keys, records, ["a"]) == {"c": ["org/c/x"], "d": ["org/d/x"]}
    error = LastCopyError(last_copies(keys, records, []), records)
    assert "2 object(s) of a (org/model@0123456789ab: deleted upstream since t1, e.g. org/a/x)" in error.message
    assert error.hint is not None and "--allow-last-copy-deletion a --allow-last-copy-deletion c" in error.hint
    every = {u.value: rec(u.value, u.value) for u in Upstream}  # moved and unreachable are unproven too
    assert set(last_copies([f"org/{u.value}/x" for u in Upstream], every, [])) == {u.value for u in Upstream} - {"ok"}


def test_a_version_1_ok_whose_grant_was_never_checked_is_read_as_gated() -> None:
    fields = {
        "hf_repo": "org/a",
        "repo_type": "model",
        "revision": REV,
        "prefix": "org/a/",
        "upstream": "ok",
        "checked_at": "t1",
        "gone_since": None,
    }
    pins = {
        "a": fields | {"detail": "gated (manual); whether this token was granted access was not checked"},
        "b": fields | {"detail": "the pinned commit resolves"},
    }
    read = from_bytes(json.dumps({"version": 1, "audited_at": "t1", "pins": pins}).encode())
    assert read["a"].upstream == "gated" and read["b"].upstream == "ok"


def test_a_gated_repo_is_ok_only_when_the_head_of_a_pinned_file_succeeds() -> None:
    gated = classify(200, {}, {"sha": REV, "gated": "manual"}, SOURCE, authenticated=True)
    assert gated.upstream is Upstream.GATED and gated.grant_unproven
    assert not classify(200, {}, {"sha": REV, "gated": "manual"}, SOURCE, authenticated=False).grant_unproven
    assert classify_grant(200, gated, "config.json").upstream is Upstream.OK
    assert classify_grant(302, gated, "model.safetensors").upstream is Upstream.OK  # an LFS file: its CDN
    assert classify_grant(401, gated, "config.json") == Finding(
        Upstream.GATED, "gated (manual): this token is not granted access (401 on HEAD config.json)"
    )
    assert classify_grant(503, gated, "config.json").upstream is Upstream.UNREACHABLE
    assert classify_grant("ConnectError", gated, "config.json").upstream is Upstream.UNREACHABLE
