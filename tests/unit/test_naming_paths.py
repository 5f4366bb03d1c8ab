"""Odd paths and repo ids that validation must refuse (so no store, cache or OS ever meets them), and the
ones it must keep accepting. Each refusal is also checked end to end: validate names file:line."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest
from helpers import SHA, files_yaml, manifest_text, write_catalog
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog import naming
from catalog.loading import load_dir

NFC = unicodedata.normalize("NFC", "café.json")
NFD = unicodedata.normalize("NFD", "café.json")

REFUSED = {
    ".catalog-meta/x.json": "keep for themselves",  # the folder store's sidecar metadata
    "sub/.catalog-tmp/x.bin": "keep for themselves",  # the folder store's temp files
    "con": "device name",
    "nul.txt": "device name",
    "sub/AUX.json": "device name",
    "com1.tar.gz": "device name",
    "LPT9": "device name",
    "config.json ": "space or '.'",
    "weights.": "space or '.'",
    "dir./config.json": "space or '.'",
    "dir /config.json": "space or '.'",
    NFD: "NFC",
}

ACCEPTED = [
    "config.json",
    "model.part",
    "console.json",
    "conf/aux_head.json",
    "1_Pooling/config.json",
    NFC,
    "données/tokenizer.json",
    ".gitattributes",
    "a.b.c",
]


@pytest.mark.parametrize("path", sorted(REFUSED))
def test_odd_paths_are_refused(path: str) -> None:
    message = naming.check_relative_path(path)
    assert message is not None and REFUSED[path] in message


@pytest.mark.parametrize("path", ACCEPTED)
def test_ordinary_paths_are_accepted(path: str) -> None:
    assert naming.check_relative_path(path) is None


# Paths made of the characters each rule is about: dots at either end of a segment, device names, '.git', the
# reserved folders, spaces, a control character, a drive letter, separators, non-ASCII.
_PIECES = [
    "a",
    "b.c",
    ".",
    "..",
    "/",
    "//",
    "con",
    "NUL",
    "com1",
    "lpt9.x",
    ".git",
    ".catalog-meta",
    " ",
    "\x01",
    "C:",
    "\\",
    "é",
    "e\u0301",
    "_",
    "-",
    "+",
    "0",
    "x.",
    ".y",
    "~catalog.12-ab",
]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=0, max_size=8).map("".join))
def test_the_fast_accept_of_plain_names_agrees_with_every_rule(path: str) -> None:
    """check_relative_path accepts plain ASCII names without running each rule; it must never accept a path one of
    the rules refuses (nor refuse one they all accept)."""
    assert naming.check_relative_path(path) == naming._check_path_in_full(path)


@pytest.mark.parametrize("repo", ["org/a--b", "org--a/b", "org/--x"])
def test_repo_ids_that_share_an_hf_cache_folder_are_refused(repo: str) -> None:
    assert naming.check_hf_repo(repo) is not None


def test_single_hyphens_in_repo_ids_are_fine() -> None:
    assert naming.check_hf_repo("sentence-transformers/all-MiniLM-L6-v2") is None


def test_validate_names_the_line_of_each_odd_path(tmp_path: Path) -> None:
    files = files_yaml(
        ("config.json", 10, SHA),
        ("model.safetensors", 1000, "b" * 64),
        (NFC, 5, "c" * 64),
        (NFD, 5, "d" * 64),
        ("nul.txt", 5, "e" * 64),
        (".catalog-meta/x.json", 5, "f" * 64),
        ("notes. ", 5, "ab" * 32),
    )
    text = manifest_text(files=files).replace("notes. \n", "'notes. '\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        folder = write_catalog(tmp_path, {"tiny.yaml": text})
        found = load_dir(folder).problems
    # files start at line 9, three lines each: items 3..6 are the odd ones
    assert [(p.path, p.line, p.field, p.rule) for p in found] == [
        ("manifests/tiny.yaml", 9 + 3 * i, f"files[{i}].path", "file-path") for i in (3, 4, 5, 6)
    ]


def test_validate_refuses_a_repo_id_with_a_double_hyphen(tmp_path: Path) -> None:
    text = manifest_text().replace("hf_repo: org/tiny", "hf_repo: org/ti--ny")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        found = load_dir(write_catalog(tmp_path, {"tiny.yaml": text})).problems
    assert [(p.line, p.rule) for p in found] == [(3, "hf-repo")]


def test_a_pinned_path_can_never_look_like_the_caches_staging_names() -> None:
    from resolver.fsutil import STAGING
    from resolver.view_stamps import staging_name

    made = staging_name("tokenizer.json")
    assert STAGING.match(made)  # what the cache writes ...
    assert naming.check_relative_path(f"sub/{made}") is not None  # ... validation refuses as a pinned path
    assert naming.check_relative_path(".tokenizer.json.99999-deadbeef") is None  # the old shape is an ordinary name
