"""vLLM's compile cache as a derived entry, proven by the engine: a first runner compiles (no --enforce-eager) and
publishes what the engine left; a second runner, with its own catalog cache (so the model's folder, and the path vLLM
sees, differ) and its own empty engine cache folder, restores the entry and its engine start hits it, by the engine's
own counters (torch inductor's FX-graph and AOTAutograd caches: hits, no miss), with the reference's tokens.

Each runner is a worker process of its own, started in the environment `catalog derived restore --format env` exports
(resolver/loaders/vllm_worker.py reports the counters). The engine compiles once here: a minute or so on two busy cores.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from engine_support import MAX_TOKENS, PROMPTS, ROOT, EngineSession, Reference, assert_matches

from resolver.loaders.vllm_engine import EngineJob, EngineResult

# The harness's options without --enforce-eager: the engine compiles with torch inductor.
COMPILED = ("--dtype", "float32", "--max-model-len", "64")
NAME = "tiny-llama"


def catalog(session: EngineSession, cache: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "catalog", "--catalog", str(ROOT / "manifests"), *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **session.env, "CATALOG_STORE": session.store, "CATALOG_CACHE": str(cache)},
    )
    assert done.returncode == 0, f"catalog {' '.join(args)}: {done.stderr}"
    return done.stdout


def exports(text: str) -> dict[str, str]:
    pairs = (line.removeprefix("export ").partition("=") for line in text.splitlines())
    return {key: shlex.split(value)[0] if value else "" for key, _, value in pairs}


def runner(session: EngineSession, folder: Path) -> tuple[list[str], dict[str, str], EngineResult]:
    """One CI runner: resolve, restore the compile cache, start the engine, and (a miss) publish afterwards."""
    cache, engine_cache = folder / "catalog-cache", folder / "vllm-cache"
    args = shlex.split(catalog(session, cache, "resolve", NAME, "--format", "vllm-args"))
    env = exports(
        catalog(
            session,
            cache,
            "derived",
            "restore",
            NAME,
            "--engine-cache",
            str(engine_cache),
            "--format",
            "env",
            "--",
            *args,
            *COMPILED,
        )
    )
    job = EngineJob(f"compiled:{folder.name}", (*args, *COMPILED), prompt=PROMPTS[NAME], max_tokens=MAX_TOKENS)
    result = session.run([job], **env)[job.id]
    if env["CATALOG_DERIVED_HIT"] == "0":
        catalog(session, cache, "derived", "publish", NAME, "--engine-cache", str(engine_cache))
    return args, env, result


Runner = tuple[list[str], dict[str, str], EngineResult]


@pytest.fixture(scope="module")
def runners(engine_session: EngineSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Runner, Runner]:
    first = runner(engine_session, tmp_path_factory.mktemp("runner-1"))
    second = runner(engine_session, tmp_path_factory.mktemp("runner-2"))
    return first, second


def test_the_first_runner_compiles_and_the_second_starts_from_its_cache(
    runners: tuple[Runner, Runner], references: dict[str, Reference]
) -> None:
    (args_1, env_1, first), (args_2, env_2, second) = runners
    # Two runners that share nothing on disk: the model's folder and the engine's cache folder differ.
    assert args_1[args_1.index("--model") + 1] != args_2[args_2.index("--model") + 1]
    assert env_1["VLLM_CACHE_ROOT"] != env_2["VLLM_CACHE_ROOT"]
    assert env_1["CATALOG_DERIVED_KEY"] == env_2["CATALOG_DERIVED_KEY"]
    # The first found nothing stored and compiled: its engine missed inductor's caches.
    assert env_1["CATALOG_DERIVED_HIT"] == "0"
    assert_matches(first, references[NAME], served=NAME)
    misses = first.compile.get("inductor.fxgraph_cache_miss", 0) + first.compile.get(
        "aot_autograd.autograd_cache_miss", 0
    )
    assert misses >= 1, first.compile
    # The second restored the entry, and its engine compiled nothing: every graph came from the restored cache.
    assert env_2["CATALOG_DERIVED_HIT"] == "1"
    assert_matches(second, references[NAME], served=NAME)
    hits = second.compile.get("inductor.fxgraph_cache_hit", 0) + second.compile.get(
        "aot_autograd.autograd_cache_hit", 0
    )
    assert hits >= 1, second.compile
    assert second.compile.get("inductor.fxgraph_cache_miss", 0) == 0, second.compile
    assert second.compile.get("aot_autograd.autograd_cache_miss", 0) == 0, second.compile
