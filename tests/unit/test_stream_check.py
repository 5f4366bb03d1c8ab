"""The streamed-weights decision as a table: (listing, state records, deep digests) -> problems."""

from __future__ import annotations

from typing import Any

import pytest

from catalog.errors import IntegrityError, MissingObjectError
from catalog.schema import FileEntry
from resolver.stores import ObjectInfo
from resolver.stream_check import Kind, StreamProblem, check, to_error

PREFIX = "org/m/rev/"
A = FileEntry(path="model-00001.safetensors", size=100, sha256="a" * 64)
B = FileEntry(path="model-00002.safetensors", size=50, sha256="b" * 64)


def obj(entry: FileEntry, *, size: int | None = None, etag: str | None = "e1") -> ObjectInfo:
    return ObjectInfo(PREFIX + entry.path, entry.size if size is None else size, etag=etag)


def rec(entry: FileEntry, *, sha: str | None = None, etag: str | None = "e1") -> dict[str, Any]:
    return {"size": entry.size, "sha256": entry.sha256 if sha is None else sha, "etag": etag}


CASES = [
    # (id, listing, records, digests, expected [(path, kind)]); the streamed files are A, or A and B when B is named
    ("verified", [obj(A)], {A.path: rec(A)}, None, []),
    ("missing", [], {A.path: rec(A)}, None, [(A.path, Kind.MISSING)]),
    (
        "other-prefix-does-not-count",
        [ObjectInfo("org/other/" + A.path, 100, etag="e1")],
        {A.path: rec(A)},
        None,
        [(A.path, Kind.MISSING)],
    ),
    ("resized", [obj(A, size=99)], {A.path: rec(A)}, None, [(A.path, Kind.SIZE)]),
    ("rewritten-same-size", [obj(A, etag="e2")], {A.path: rec(A)}, None, [(A.path, Kind.REWRITTEN)]),
    ("no-etag-listed", [obj(A, etag=None)], {A.path: rec(A, etag=None)}, None, [(A.path, Kind.REWRITTEN)]),
    ("never-verified", [obj(A)], {}, None, [(A.path, Kind.UNVERIFIED)]),
    ("record-for-other-bytes", [obj(A)], {A.path: rec(A, sha="c" * 64)}, None, [(A.path, Kind.UNVERIFIED)]),
    ("deep-ok-without-records", [obj(A)], {}, {A.path: A.sha256}, []),
    ("deep-wrong-bytes", [obj(A)], {A.path: rec(A)}, {A.path: "d" * 64}, [(A.path, Kind.SHA256)]),
    ("deep-still-needs-the-size", [obj(A, size=1)], {}, {}, [(A.path, Kind.SIZE)]),
    (
        "every-problem-in-manifest-order",
        [obj(B, etag="x")],
        {B.path: rec(B)},
        None,
        [(A.path, Kind.MISSING), (B.path, Kind.REWRITTEN)],
    ),
    ("two-verified", [obj(A), obj(B, etag="e9")], {A.path: rec(A), B.path: rec(B, etag="e9")}, None, []),
]


@pytest.mark.parametrize(
    ("listing", "records", "digests", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_check(
    listing: list[ObjectInfo], records: dict[str, Any], digests: dict[str, str] | None, expected: list[tuple[str, Kind]]
) -> None:
    files = [A, B] if any(o.key.endswith(B.path) for o in listing) else [A]
    problems = check(files, PREFIX, listing, records, digests)
    assert [(p.path, p.kind) for p in problems] == expected


def test_problems_carry_expected_and_got() -> None:
    [size] = check([A], PREFIX, [obj(A, size=7)], {})
    assert (size.expected, size.got) == ("100", "7")
    [etag] = check([A], PREFIX, [obj(A, etag="new")], {A.path: rec(A, etag="old")})
    assert (etag.expected, etag.got) == ("old", "new")


@pytest.mark.parametrize(
    ("kind", "error", "words"),
    [
        (Kind.MISSING, MissingObjectError, "is missing from the store"),
        (Kind.SIZE, IntegrityError, "resized"),
        (Kind.REWRITTEN, IntegrityError, "rewritten since sync verified it"),
        (Kind.UNVERIFIED, IntegrityError, "never verified"),
        (Kind.SHA256, IntegrityError, "corrupt"),
    ],
)
def test_errors_name_model_file_expected_and_got(kind: Kind, error: type[Exception], words: str) -> None:
    problems = [StreamProblem(A.path, kind, "EXPECTED", "GOT"), StreamProblem(B.path, Kind.MISSING, "1", "2")]
    exc = to_error("tiny", problems, "s3://b/org/m/rev/")
    assert isinstance(exc, error)
    text = str(exc)
    assert f"tiny/{A.path}" in text and words in text and "and 1 more" in text and B.path in text
    if kind is not Kind.MISSING:
        assert "EXPECTED" in text and "GOT" in text and "deleted the download" not in text
    assert exc.hint  # type: ignore[attr-defined]
