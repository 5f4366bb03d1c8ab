"""Every relative link in README.md and docs/*.md names a file that exists, and a heading of it where it names one
(`page.md#anchor`, as GitHub makes anchors from headings)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted(["README.md", *(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))])
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE = re.compile(r"(`+).*?\1", re.S)
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # https:, mailto:, ...


def prose(text: str) -> str:
    """`text` without fenced blocks and inline code, where brackets and parentheses are not links."""
    return CODE.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    body = prose(text)
    return [m.group(1) for m in INLINE.finditer(body)] + [m.group(1) for m in REFERENCE.finditer(body)]


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of `text`: lower case, punctuation dropped, spaces as hyphens, a repeated
    one suffixed -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", FENCE.sub("", text), re.M):
        plain = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", plain.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def broken(source: Path) -> list[str]:
    found = []
    for target in links(source.read_text()):
        if EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        file = (source.parent / path).resolve() if path else source
        if not file.exists():
            found.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            found.append(f"{target}: no heading with that anchor")
    return found


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_relative_link_points_at_what_exists(document: str) -> None:
    assert broken(ROOT / document) == []


def test_a_broken_link_and_a_broken_anchor_are_caught(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# B page\n\n## The `cache`, again\n\n## The cache again\n")
    (tmp_path / "a.md").write_text(
        "[ok](docs/b.md) [ok](docs/b.md#the-cache-again) [ok](docs/b.md#the-cache-again-1) [ok](#top)\n"
        "[gone](docs/c.md) [bad](docs/b.md#nowhere) [web](https://example.com/x.md) `[code](docs/none.md)`\n"
        "```\n[fenced](docs/none.md)\n```\n\n[ref]: docs/d.md\n\n# Top\n"
    )
    assert broken(tmp_path / "a.md") == [
        "docs/c.md: no such file",
        "docs/b.md#nowhere: no heading with that anchor",
        "docs/d.md: no such file",
    ]
