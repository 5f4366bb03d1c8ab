"""The pytest plugin's session report, per test: the models it used, the Hub requests the guard refused, how long
each model took to be ready against its budget, the baselines it checked. Rendered for the terminal summary, as
JSON, and as Markdown for a CI annotation (`buildkite-agent annotate`, `$GITHUB_STEP_SUMMARY`). Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from catalog_app.markdown import table

FORMATS = ("json", "markdown")


@dataclass
class TestRecord:
    """One test's part of the report (a JSON-able value: it travels from an xdist worker in its report)."""

    nodeid: str
    outcome: str = "passed"
    models: list[dict[str, str]] = field(default_factory=list)  # {name, via, text}
    guarded: list[dict[str, Any]] = field(default_factory=list)  # hub_guard.Finding.to_json()
    ready: list[dict[str, Any]] = field(default_factory=list)  # {model, seconds, budget_s, profile, over}
    baselines: list[dict[str, Any]] = field(
        default_factory=list
    )  # {model, metric, dataset, measured, value, tolerance, ok}

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.nodeid,
            "outcome": self.outcome,
            "models": self.models,
            "guarded": self.guarded,
            "ready": self.ready,
            "baselines": self.baselines,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TestRecord:
        return cls(
            str(data["test"]),
            str(data.get("outcome") or "passed"),
            list(data.get("models") or []),
            list(data.get("guarded") or []),
            list(data.get("ready") or []),
            list(data.get("baselines") or []),
        )

    def used(self) -> str:
        """`tiny-llama (marker), model-catalog/tiny-qwen2 -> tiny-qwen2 (repo id)`."""
        return (
            ", ".join(
                m["name"] + (f" ({m['via']})" if m["text"] == m["name"] else f" ({m['via']} {m['text']})")
                for m in self.models
            )
            or "-"
        )

    def ready_text(self) -> str:
        return ", ".join(
            f"{r['model']} {r['seconds']:.1f} s"
            + (f" of {r['budget_s']:g} s" if r.get("budget_s") else "")
            + (" OVER" if r.get("over") else "")
            for r in self.ready
        )


def summary(records: Sequence[TestRecord], outside: Sequence[Mapping[str, Any]], guard: str | None) -> dict[str, Any]:
    models = sorted({m["name"] for r in records for m in r.models})
    return {
        "hub_guard": guard,
        "tests": len(records),
        "models": models,
        "guarded_requests": sum(len(r.guarded) for r in records) + len(outside),
        "guarded_outside_tests": list(outside),
        "over_budget": [f"{r.nodeid}: {x['model']}" for r in records for x in r.ready if x.get("over")],
    }


def render_json(records: Sequence[TestRecord], outside: Sequence[Mapping[str, Any]], guard: str | None) -> str:
    return json.dumps({"summary": summary(records, outside, guard), "tests": [r.to_json() for r in records]}, indent=2)


def render_markdown(records: Sequence[TestRecord], outside: Sequence[Mapping[str, Any]], guard: str | None) -> str:
    s = summary(records, outside, guard)
    lines = [
        f"### model-catalog: {s['tests']} test(s), {len(s['models'])} model(s), "
        f"{s['guarded_requests']} Hub request(s) refused",
        "",
    ]
    rows = [
        (
            f"`{r.nodeid}`",
            r.outcome,
            r.used(),
            r.ready_text() or "-",
            "<br>".join(f"**{_asked(g)}**: {g['message']}" for g in r.guarded) or "-",
        )
        for r in records
    ]
    lines.append(table(("test", "outcome", "models", "ready", "Hub requests refused"), rows))
    if outside:
        lines += ["", "Refused outside any test:", ""] + [
            f"- {g['method']} {g['path']}: {g['message']}" for g in outside
        ]
    return "\n".join(lines) + "\n"


def render_terminal(
    records: Sequence[TestRecord], outside: Sequence[Mapping[str, Any]], guard: str | None
) -> list[str]:
    """The terminal summary: one line per test that used a model or asked the Hub, each refused request under it."""
    s = summary(records, outside, guard)
    lines = []
    for r in records:
        if not (r.models or r.guarded or r.ready):
            continue
        ready = f"; ready {r.ready_text()}" if r.ready else ""
        lines.append(f"{r.nodeid}: {r.used()}{ready}")
        lines += [f"    refused {_asked(g)}: {g['message']}" for g in r.guarded]
    lines += [f"refused outside any test: {_asked(g)}: {g['message']}" for g in outside]
    state = f"hub guard {'on' if guard else 'off'}"
    lines.append(
        f"catalog: {s['tests']} test(s) used {len(s['models'])} model(s); {state}: "
        f"{s['guarded_requests']} Hub request(s) refused"
        + (f"; {len(s['over_budget'])} over their ready-time budget" if s["over_budget"] else "")
    )
    return lines


def _asked(g: Mapping[str, Any]) -> str:
    """A refused request, short: `HEAD org/name@rev file`, or the method and path of one about no repo."""
    if not g.get("repo"):
        return f"{g['method']} {g['path']}"
    rev = g.get("revision") or "main"
    return f"{g['method']} {g['repo']}@{rev[:12]} {g.get('file') or 'metadata'}"


RENDERERS = {"json": render_json, "markdown": render_markdown}
