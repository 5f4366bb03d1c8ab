"""The pure sync planner, table-driven (in the style of dvc-data's diff tests): listing + records -> actions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog.schema import FileEntry, ModelManifest
from resolver.stores import ObjectInfo
from resolver.sync import Action, plan

SHA, OTHER = "a" * 64, "b" * 64
PIN = FileEntry(path="w.safetensors", size=10, sha256=SHA)


def manifest(name: str, *files: FileEntry) -> ModelManifest:
    return ModelManifest.model_validate(
        {
            "name": name,
            "source": {"hf_repo": f"org/{name}", "revision": "0" * 40},
            "s3_prefix": f"s3://b/{name}/",
            "load_format": "safetensors",
            "files": [f.model_dump() for f in files],
        }
    )


M = manifest("m", PIN)
KEY = "m/w.safetensors"


def decide(
    listing: list[ObjectInfo], record: Mapping[str, Any] | None = None, deep: Mapping[str, str] | None = None
) -> tuple[Action, str]:
    states = {"m": {PIN.path: record}} if record is not None else {}
    [item] = [
        i for i in plan([M], {"m": "m/"}, listing, states, whole_store=False, deep_hashes=deep).items if i.key == KEY
    ]
    return item.action, item.reason


@pytest.mark.parametrize(
    ("listing", "record", "deep", "action", "why"),
    [
        ([], None, None, Action.UPLOAD, "missing"),
        ([ObjectInfo(KEY, 11, "e1")], None, None, Action.REPLACE, "11 bytes in the store"),
        ([ObjectInfo(KEY, 10, "e1")], {"sha256": SHA, "etag": "e1"}, None, Action.OK, ""),
        (
            [ObjectInfo(KEY, 10, "e2")],
            {"sha256": SHA, "etag": "e1"},
            None,
            Action.VERIFY,
            "rewritten since sync verified it",
        ),
        ([ObjectInfo(KEY, 10, "e1")], {"sha256": OTHER, "etag": "e1"}, None, Action.VERIFY, "no record"),
        ([ObjectInfo(KEY, 10, "e1")], None, None, Action.VERIFY, "no record of sync having verified it"),
        (
            [ObjectInfo(KEY, 10, None)],
            {"sha256": SHA, "etag": None},
            None,
            Action.VERIFY,
            "rewritten",
        ),  # no ETag vouches
        ([ObjectInfo(KEY, 10, "e1")], None, {KEY: SHA}, Action.OK, ""),
        ([ObjectInfo(KEY, 10, "e1")], {"sha256": SHA, "etag": "e1"}, {KEY: OTHER}, Action.REPLACE, f"sha256 {OTHER}"),
    ],
)
def test_each_file_gets_one_action(
    listing: list[ObjectInfo],
    record: Mapping[str, Any] | None,
    deep: Mapping[str, str] | None,
    action: Action,
    why: str,
) -> None:
    got, reason = decide(listing, record, deep)
    assert got is action
    assert why in reason


def test_extras_orphans_and_nested_prefixes() -> None:
    listing = [
        ObjectInfo(KEY, 10, "e"),
        ObjectInfo("m/stray.txt", 3, "e"),
        ObjectInfo("m/inner/w.safetensors", 10, "e"),
        ObjectInfo("elsewhere/x", 5, "e"),
    ]
    result = plan([M], {"m": "m/"}, listing, {}, whole_store=True, other_prefixes=["m/", "m/inner/"])
    actions = {i.key: i.action for i in result.items}
    assert actions["m/stray.txt"] is Action.EXTRA
    assert "m/inner/w.safetensors" not in actions  # the nested model's object is never the outer model's extra
    assert actions["elsewhere/x"] is Action.ORPHAN
    assert result.deletions == []  # nothing is deleted without being asked
    pruned = plan([M], {"m": "m/"}, listing, {}, whole_store=True, prune=True, other_prefixes=["m/", "m/inner/"])
    assert [i.key for i in pruned.deletions] == ["m/stray.txt"]  # --prune: extras, not orphans
    both = plan(
        [M],
        {"m": "m/"},
        listing,
        {},
        whole_store=True,
        prune=True,
        delete_orphans=True,
        other_prefixes=["m/", "m/inner/"],
    )
    assert sorted(i.key for i in both.deletions) == ["elsewhere/x", "m/stray.txt"]


def test_an_empty_catalog_or_a_partial_scope_never_calls_anything_an_orphan() -> None:
    listing = [ObjectInfo("elsewhere/x", 5, "e")]
    assert plan([], {}, listing, {}, whole_store=True, prune=True, delete_orphans=True).items == ()
    scoped = plan([M], {"m": "m/"}, listing, {}, whole_store=False, prune=True, delete_orphans=True)
    assert all(i.action is not Action.ORPHAN for i in scoped.items)


def test_the_plan_fingerprint_changes_with_the_listing() -> None:
    a = plan([M], {"m": "m/"}, [ObjectInfo(KEY, 10, "e1")], {}, whole_store=False)
    b = plan([M], {"m": "m/"}, [ObjectInfo(KEY, 10, "e2")], {}, whole_store=False)
    assert a.fingerprint != b.fingerprint and a.drift


@given(
    st.lists(st.sampled_from(["a/", "a/b/", "a/b/c/", "ab/", "x/", ""]), unique=True, min_size=1),
    st.lists(
        st.sampled_from(["a/1", "a/b/2", "a/b/c/3", "a/bc/4", "ab/5", "abc/6", "x", "x/y/7", "z/8", "a/b/"]),
        unique=True,
    ),
)
def test_each_object_belongs_to_the_longest_prefix_it_starts_with(prefixes: list[str], keys: list[str]) -> None:
    """The planner's owner lookup (folders from the deepest) against the definition (the longest prefix)."""
    names = {f"m{i}": p for i, p in enumerate(prefixes)}
    manifests = [manifest(n) for n in names]
    items = plan(manifests, names, [ObjectInfo(k, 1, "e") for k in keys], {}, whole_store=True).items
    got = {i.key: (i.model if i.action is Action.EXTRA else None) for i in items}

    def longest(key: str) -> str | None:
        owners = [n for n, p in names.items() if key.startswith(p)]
        return max(owners, key=lambda n: len(names[n])) if owners else None

    assert got == {k: longest(k) for k in keys}
