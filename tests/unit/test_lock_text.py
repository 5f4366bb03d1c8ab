"""Writing the files block: every other byte of the maintainer's manifest stays as written."""

from __future__ import annotations

import yaml

from catalog.schema import FileEntry
from resolver.lock import diff_files, render_files_block, replace_files_block, yaml_scalar

A = FileEntry(path="config.json", size=10, sha256="a" * 64)
B = FileEntry(path="sub dir/model.safetensors", size=20, sha256="1" * 64)  # all digits: must be quoted


def test_scalars_round_trip() -> None:
    for value in ["config.json", "1" * 64, "true", "a: b", "#x", "-x", "007", "sub dir/x"]:
        assert yaml.safe_load(f"k: {yaml_scalar(value)}")["k"] == value


def test_appends_a_block_and_keeps_everything_else_byte_for_byte() -> None:
    text = "# maintained by the pooling team\nname: x   # short name\nsource: {hf_repo: o/x, revision: abc}\n"
    out = replace_files_block(text, [B, A])
    assert out.startswith(text)
    assert out[len(text) :] == render_files_block([A, B])
    assert yaml.safe_load(out)["files"] == [
        {"path": A.path, "size": 10, "sha256": A.sha256},
        {"path": B.path, "size": 20, "sha256": B.sha256},
    ]


def test_replaces_a_block_in_the_middle_keeping_the_comment_of_the_next_key() -> None:
    text = (
        "name: x\nfiles:\n  - path: old.json\n    size: 1\n    sha256: "
        + "f" * 64
        + "\n\n# tags drive the GPU matrix\ntags: [a]\n"
    )
    out = replace_files_block(text, [A])
    assert out == "name: x\n" + render_files_block([A]) + "\n# tags drive the GPU matrix\ntags: [a]\n"


def test_replaces_an_inline_empty_list_and_column_zero_items() -> None:
    assert (
        replace_files_block("name: x\nfiles: []\ntags: []\n", [A])
        == "name: x\n" + render_files_block([A]) + "tags: []\n"
    )
    zero = "files:\n- path: a\n  size: 1\n  sha256: " + "b" * 64 + "\nname: x\n"
    assert replace_files_block(zero, [A]) == render_files_block([A]) + "name: x\n"


def test_diff_lines() -> None:
    changed = FileEntry(path="config.json", size=11, sha256="c" * 64)
    assert diff_files([A], [changed, B]) == [
        f"~ config.json: sha256 {'a' * 64} (10 bytes) -> {'c' * 64} (11 bytes)",
        f"+ sub dir/model.safetensors (20 bytes, sha256 {'1' * 64})",
    ]
