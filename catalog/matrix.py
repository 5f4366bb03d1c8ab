"""`catalog matrix`: which models each GPU class needs, for pipeline generators (pure)."""

from __future__ import annotations

from typing import Any

from catalog.lookup import Catalog


def gpu_matrix(cat: Catalog, gpu: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """GPU class -> the models tested on it (name, count, bytes, load format), classes and models sorted."""
    out: dict[str, list[dict[str, Any]]] = {}
    for m in sorted(cat, key=lambda m: m.name):
        gpu_class = cat.gpu_class(m)
        if gpu is not None and gpu_class != gpu:
            continue
        out.setdefault(gpu_class, []).append(
            {"name": m.name, "gpu_count": m.gpu.count, "bytes": m.total_bytes, "load_format": m.load_format.value}
        )
    return dict(sorted(out.items()))


def buildkite_steps(matrix: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """One cache pre-warm step per GPU class, on that class's queue: its models resolved in one call."""
    steps = []
    for gpu_class, models in matrix.items():
        names = " ".join(m["name"] for m in models)
        steps.append({
            "label": f":package: pre-warm {gpu_class} ({len(models)} model{'s' if len(models) != 1 else ''})",
            "key": f"catalog-prewarm-{gpu_class.replace('_', '-')}",
            "agents": {"queue": gpu_class},
            "env": {"CATALOG_MODE": "ci", "CATALOG_MODELS": names},
            "command": f"catalog resolve {names} --format json",
        })
    return {"steps": steps}
