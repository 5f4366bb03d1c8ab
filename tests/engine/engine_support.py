"""The engine tier: vLLM (its CPU build here, the CUDA build on a GPU runner) loads what the catalog hands out.

Every bundled model is synced into a SeaweedFS bucket with `catalog sync --from-dir` and resolved with the CLI, as CI
would; the engine gets exactly the printed outputs (`--format path | vllm-args | env | redirect`, `--layout
hf-cache`). Loads run in the engine's worker processes (resolver/loaders/vllm_worker.py: vLLM's own argument parser,
then `LLM`), grouped by environment so vLLM is imported a few times per session, not once per load; the tier is one
test file, and the test command gives each file one xdist worker (`--dist loadfile`), so the session fixtures run once.

References are computed by transformers (sentence-transformers for the embedding model) from the verified local
files, in float32; the engine runs in float32 too (`--dtype float32`, a harness option like the short context), so
greedy tokens must be equal, not close: the bundled models decide each token by a clear margin.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from resolver.loaders.vllm_engine import EngineJob, EngineResult, run_jobs

ROOT = Path(__file__).resolve().parents[2]
# Harness options, the same for every load and for the reference: float32 on both sides, a short context, no
# graph capture. The catalog's own arguments come first, exactly as printed.
HARNESS = ("--dtype", "float32", "--max-model-len", "64", "--enforce-eager")
# Prompts from each tokenizer's vocabulary (the Llama-shaped models know the words w3 ... w63).
PROMPTS = {
    "all-minilm-l6-v2": "the catalog pins model weights",
    "tiny-llama": "w5 w6 w7",
    "tiny-qwen2": "hello world the model",
}
# A derived artifact of tiny-llama's weights answers with tiny-llama's tokens.
REFERENCE_OF = {"tiny-llama-sharded": "tiny-llama", "tiny-llama-tensorizer": "tiny-llama"}
MAX_TOKENS = 8


@dataclass(frozen=True)
class Reference:
    prompt: str
    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...] = ()
    embedding: tuple[float, ...] = ()


@dataclass
class EngineSession:
    """The catalog as CI runs it against one bucket, one cache and a private HOME for the engine."""

    store: str
    cache: Path
    home: Path
    hub_url: str  # the Hub double: no request may reach it
    env: dict[str, str] = field(default_factory=dict)

    def catalog(self, *args: str, env: Mapping[str, str] | None = None) -> str:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "catalog",
                "--catalog",
                str(ROOT / "manifests"),
                *args,
                "--store",
                self.store,
                "--cache",
                str(self.cache),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, **self.env, **(env or {})},
            check=False,
        )
        assert done.returncode == 0, f"catalog {' '.join(args)}: {done.stderr}"
        return done.stdout

    def vllm_args(self, name: str, *flags: str, env: Mapping[str, str] | None = None) -> list[str]:
        return shlex.split(self.catalog("resolve", name, "--format", "vllm-args", *flags, env=env))

    def exported(self, *args: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """What `--format env` exports, parsed as a shell would."""
        found = {}
        for line in self.catalog(*args, "--format", "env", env=env).splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            found[key] = shlex.split(value)[0] if value else ""
        return found

    def run(self, jobs: Sequence[EngineJob], **env: str) -> dict[str, EngineResult]:
        """Run `jobs` in one engine worker with this session's environment (plus `env`): a private HOME and caches,
        and the Hub at `hub_url` (a double that counts every request; offline by default)."""
        base = {
            "HOME": str(self.home),
            "VLLM_CACHE_ROOT": str(self.home / "vllm"),
            "HF_HOME": str(self.home / "hf"),
            "HF_HUB_OFFLINE": "1",
            "HF_HUB_CACHE": str(self.home / "empty-hub"),
            "HF_ENDPOINT": self.hub_url,
            "HF_HUB_DISABLE_TELEMETRY": "1",
            **env,
        }
        results = run_jobs(jobs, env=base, log=self.home / "engine.log", timeout=worker_timeout())
        return {r.id: r for r in results}


def worker_timeout(base: float = 900.0) -> float:
    """The cap on one engine worker: `base` on a quiet machine, up to 4x as long when the run queue is longer than
    the cores (a CI runner with a noisy neighbour, or two suites at once: the per-rank loads of the tensor-parallel
    model then take several times as long, and a fixed cap failed them)."""
    busy = os.getloadavg()[0] / (os.cpu_count() or 1)
    return base * min(4.0, max(1.0, busy))


def job(id: str, args: Sequence[str], model: str, env: Mapping[str, str] | None = None) -> EngineJob:
    return EngineJob(
        id, (*args, *HARNESS), dict(env or {}), prompt=PROMPTS[REFERENCE_OF.get(model, model)], max_tokens=MAX_TOKENS
    )


def assert_matches(result: EngineResult, reference: Reference, served: str | None) -> None:
    """The engine loaded it, serves it under `served` (when given), and computes what the reference computes."""
    assert result.ok, result.error
    assert served is None or result.served_model_name == served
    if reference.embedding:
        import numpy as np

        got = np.array(result.embedding)
        cosine = float(got @ np.array(reference.embedding) / np.linalg.norm(got))
        assert cosine > 0.9999, f"embedding differs from sentence-transformers' (cosine {cosine})"
        return
    assert result.prompt_token_ids == reference.prompt_token_ids
    assert result.token_ids == reference.token_ids, f"engine {result.token_ids} != reference {reference.token_ids}"
