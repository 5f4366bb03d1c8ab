"""Render validation problems as text, JSON or GitHub workflow annotations (pure)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from catalog.errors import Problem

FORMATS = ("text", "json", "github")


def render(problems: Sequence[Problem], fmt: str, *, checked: int) -> str:
    if fmt == "json":
        return json.dumps(
            {
                "ok": not problems,
                "manifests": checked,
                "problems": [
                    {"path": p.path, "line": p.line, "field": p.field, "rule": p.rule, "message": p.message}
                    for p in problems
                ],
            },
            indent=2,
        )
    if fmt == "github":
        return "\n".join(_annotation(p) for p in problems)
    return "\n".join(f"{p}  [{p.rule}]" for p in problems)


def summary(problems: Sequence[Problem], *, checked: int) -> str:
    if not problems:
        return f"ok: {checked} manifest{'s' if checked != 1 else ''} valid"
    files = len({p.path for p in problems})
    return f"{len(problems)} problem{'s' if len(problems) != 1 else ''} in {files} file{'s' if files != 1 else ''} ({checked} checked)"


def _escape(value: str, *, property_value: bool = False) -> str:
    # GitHub's workflow-command escaping: data escapes %, CR, LF; properties also ':' and ','.
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if property_value:
        value = value.replace(":", "%3A").replace(",", "%2C")
    return value


def _annotation(p: Problem) -> str:
    props = [f"file={_escape(p.path, property_value=True)}"]
    if p.line:
        props.append(f"line={p.line}")
    props.append(f"title={_escape(p.rule, property_value=True)}")
    message = f"{p.field}: {p.message}" if p.field else p.message
    return f"::error {','.join(props)}::{_escape(message)}"
