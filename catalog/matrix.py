"""`catalog matrix`: which models each GPU class needs, for pipeline generators (pure)."""

from __future__ import annotations

import re
import shlex
from typing import Any

from catalog.lookup import Catalog


def gpu_matrix(cat: Catalog, gpu: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """GPU class -> the models tested on it (name, count, bytes, load format, and the engine profile the model has for
    that class: its arguments, environment and ready-time budget, or None), classes and models sorted."""
    out: dict[str, list[dict[str, Any]]] = {}
    for m in sorted(cat, key=lambda m: m.name):
        gpu_class = cat.gpu_class(m)
        if gpu is not None and gpu_class != gpu:
            continue
        profile = m.profiles.get(gpu_class)
        out.setdefault(gpu_class, []).append(
            {
                "name": m.name,
                "gpu_count": m.gpu.count,
                "bytes": m.total_bytes,
                "load_format": m.load_format.value,
                "profile": None
                if profile is None
                else {
                    "args": list(profile.command_line()),
                    "env": dict(profile.env),
                    "ready_budget_s": profile.ready_budget_s,
                },
            }
        )
    return dict(sorted(out.items()))


def _key(*parts: str) -> str:
    """A Buildkite step key: letters, digits, '-' (a model name's '.' and a class's '_' become '-')."""
    return re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower())


def buildkite_steps(matrix: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per GPU class, on that class's queue: one cache pre-warm step (its models resolved in one call), then one job per
    model an engine loads, after it, carrying the model's profile for the class (the engine arguments its
    `catalog resolve --format vllm-args` adds, the environment, the ready-time budget) in its environment."""
    steps: list[dict[str, Any]] = []
    for gpu_class, models in matrix.items():
        names = " ".join(m["name"] for m in models)
        prewarm = f"catalog-prewarm-{_key(gpu_class)}"
        steps.append(
            {
                "label": f":package: pre-warm {gpu_class} ({len(models)} model{'s' if len(models) != 1 else ''})",
                "key": prewarm,
                "agents": {"queue": gpu_class},
                "env": {"CATALOG_MODE": "ci", "CATALOG_GPU_CLASS": gpu_class, "CATALOG_MODELS": names},
                "command": f"catalog resolve {names} --format json",
            }
        )
        for m in models:
            if m["load_format"] == "dataset":
                continue  # data, not a job: the jobs that measure on it resolve it
            profile = m["profile"] or {"args": [], "env": {}, "ready_budget_s": None}
            env = {
                **profile["env"],
                "CATALOG_MODE": "ci",
                "CATALOG_GPU_CLASS": gpu_class,
                "CATALOG_MODEL": m["name"],
                "CATALOG_ENGINE_ARGS": shlex.join(profile["args"]),
            }
            if profile["ready_budget_s"] is not None:
                env["CATALOG_READY_BUDGET_S"] = f"{profile['ready_budget_s']:g}"
            steps.append(
                {
                    "label": f":gear: {m['name']} on {gpu_class}",
                    "key": f"catalog-{_key(gpu_class, m['name'])}",
                    "depends_on": prewarm,
                    "agents": {"queue": gpu_class},
                    "env": env,
                    "command": f"catalog resolve {m['name']} --format vllm-args",
                }
            )
    return {"steps": steps}
