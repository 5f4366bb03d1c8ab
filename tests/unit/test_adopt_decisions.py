"""The pure decisions behind adopting CI's caches and surviving upstream loss: how a Hub answer is classed, how an
audit's record merges and guards deletions, how tier entries and repo lists are read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from catalog.errors import UsageError
from catalog.schema import FileEntry, Source
from catalog.settings import Settings, split_tiers
from resolver.hf_tier import HfTier
from resolver.repo_list import parse_repo_list
from resolver.tiers import Tier, tiers_of

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
    here = Settings.build({"CATALOG_SHARED_CACHE": "hf:/x"}).fingerprint()
    cwd = os.getcwd()
    try:
        os.chdir("/")
        assert Settings.build({"CATALOG_SHARED_CACHE": "hf:/x"}).fingerprint() == here  # no working directory in it
    finally:
        os.chdir(cwd)


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
    assert tier.candidates(entry, SOURCE) == [(repo / "blobs" / "1234").resolve(), (repo / "blobs" / ("a" * 64)).resolve()]
    assert tier.candidates(entry, None) == []  # without the manifest's revision it cannot look
    assert tier.candidates(FileEntry(path="../x", size=1, sha256="a" * 64), SOURCE) == []
    assert tier.candidates(entry, Source(hf_repo="org/model", revision="main")) == []


def test_a_repo_list_reads_revisions_and_classes_and_names_bad_lines() -> None:
    text = "# models\norg/a\norg/b@v1 --gpu l4   # tagged\norg/c@" + REV + " h200\norg/d --gpu=cpu\n"
    listed = parse_repo_list(text, "models.txt", ["cpu", "l4", "h200"])
    assert [(x.repo, x.ref, x.gpu, x.where) for x in listed] == [
        ("org/a", "main", None, "models.txt:2"), ("org/b", "v1", "l4", "models.txt:3"), ("org/c", REV, "h200", "models.txt:4"),
        ("org/d", "main", "cpu", "models.txt:5")]
    with pytest.raises(UsageError) as caught:
        parse_repo_list("org/a\nnoslash\norg/b x y\norg/a@main\norg/c --gpu tpu\n", "m.txt", ["cpu"])
    message = caught.value.message
    assert "4 bad line(s)" in message and "m.txt:2:" in message and "m.txt:3: expected" in message
    assert "m.txt:4: org/a@main is listed again (first at m.txt:1)" in message and "m.txt:5: unknown GPU class 'tpu'" in message
