"""Benchmark: time from `catalog resolve` to the engine's first token, beside the engine fetching the same model by itself.

    .venv/bin/python bench/engine_ttft.py [--runs 3] [--models tiny-llama tiny-qwen2]

The bundled local model (tiny-llama, safetensors) and streamed model (tiny-qwen2, runai_streamer) are generated
(resolver/examples.py), synced into a SeaweedFS bucket with `catalog sync --from-dir` and served by the Hub double
(tests/hubdouble.py). Each round, for each model, four ways to the first token, in turn:

- catalog, cold cache: `catalog resolve NAME --format vllm-args` (and `--format env`, which a streamed model needs)
  into an empty cache, then the engine with exactly those arguments;
- catalog, warm cache: the same with the cache of the previous run (the warm index answers);
- the engine from the bucket by itself: `--model s3://bucket/prefix/ --load-format runai_streamer`;
- the engine from the Hub double by repo id: `--model org/name --revision R`, HF_ENDPOINT at the double, an empty HF
  cache.

The engine is vLLM's CPU build, driven as resolver/loaders/vllm_worker.py drives it (in one process:
VLLM_ENABLE_V1_MULTIPROCESSING=0, `--distributed-executor-backend uni`, VLLM_CPU_KVCACHE_SPACE=1, float32, a short
context, eager), each run a fresh process that generates one greedy token and reports when. A row's time runs from
the first command (resolve, or the engine's start) to that token, split into the catalog's part (resolve), the engine
process's start and vLLM's import (the same work in every row), building the engine (loading the weights: where the
rows differ) and generating the token.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from seaweed import ROOT, catalog, machine, s5cmd, start_server

sys.path.insert(0, str(ROOT / "tests"))
from hubdouble import HubDouble

BUCKET = "bench-engine"
HARNESS = ["--dtype", "float32", "--max-model-len", "64", "--enforce-eager", "--distributed-executor-backend", "uni"]
PROMPTS = {"tiny-llama": "w5 w6 w7", "tiny-qwen2": "hello world the model"}
ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}


def child(spec: str) -> None:
    """The engine: build it from `args`, generate one token, print when (epoch seconds) as JSON on the last line."""
    job = json.loads(spec)
    from vllm import LLM, SamplingParams
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    imported = time.time()
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())  # type: ignore[no-untyped-call]
    llm = LLM.from_engine_args(EngineArgs.from_cli_args(parser.parse_args(job["args"])))
    ready = time.time()
    out = llm.generate([job["prompt"]], SamplingParams(max_tokens=1, temperature=0))[0]
    first = time.time()
    print(
        json.dumps(
            {"imported": imported, "ready": ready, "first_token": first, "token_ids": list(out.outputs[0].token_ids)}
        )
    )
    sys.stdout.flush()
    os._exit(0)  # the token is what was measured; skip the engine's teardown


def engine(args: list[str], prompt: str, env: dict[str, str]) -> dict[str, float]:
    spec = json.dumps({"args": [*args, *HARNESS], "prompt": prompt})
    done = subprocess.run([sys.executable, __file__, "--child", spec], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the engine failed on {args}: {done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=["tiny-llama", "tiny-qwen2"])
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    import catalog as catalog_lib
    from resolver.examples import write_model

    bundled = catalog_lib.load(ROOT / "manifests")
    server, env = start_server()
    hub = HubDouble()
    work = Path(tempfile.mkdtemp(prefix="catalog-bench-engine-"))
    try:
        sources = {name: write_model(name, work / "sources") for name in args.models}
        for name, folder in sources.items():
            m = bundled.get(name)
            hub.add_repo(m.source.hf_repo, m.source.revision, folder)
        subprocess.run(
            [s5cmd(), "--endpoint-url", server.url, "mb", f"s3://{BUCKET}"], env=env, check=True, capture_output=True
        )
        store = f"s3://{BUCKET}/"
        base = [*catalog(), "--catalog", str(ROOT / "manifests")]
        for name, folder in sources.items():
            subprocess.run(
                [*base, "sync", name, "--store", store, "--from-dir", str(folder), "--cache", str(work / "sync-cache")],
                env=env,
                check=True,
                capture_output=True,
            )
        run(args, bundled, base, store, server.url, env, hub, work)
    finally:
        hub.close()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def run(
    args: argparse.Namespace,
    bundled: object,
    base: list[str],
    store: str,
    endpoint: str,
    env: dict[str, str],
    hub: HubDouble,
    work: Path,
) -> None:
    from catalog.lookup import Catalog

    assert isinstance(bundled, Catalog)
    home = work / "home"
    rows: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    engine_env = {
        **env,
        **ENGINE_ENV,
        "HOME": str(home),
        "VLLM_CACHE_ROOT": str(home / "vllm"),
        "HF_HOME": str(home / "hf"),
    }
    offline = {**engine_env, "HF_HUB_OFFLINE": "1"}
    for round_ in range(args.runs):
        for name in args.models:
            m = bundled.get(name)
            prompt = PROMPTS[name]
            cache = work / "cache"
            for way in ("catalog resolve, cold cache", "catalog resolve, warm cache"):
                if way.endswith("cold cache"):
                    shutil.rmtree(cache, ignore_errors=True)
                shutil.rmtree(home, ignore_errors=True)
                started = time.time()
                resolve = [*base, "resolve", name, "--store", store, "--cache", str(cache)]
                vllm_args = shlex.split(
                    subprocess.run(
                        [*resolve, "--format", "vllm-args"], env=env, check=True, capture_output=True, text=True
                    ).stdout
                )
                exports = subprocess.run(
                    [*resolve, "--format", "env"], env=env, check=True, capture_output=True, text=True
                ).stdout
                extra = {}
                for line in exports.splitlines():
                    key, _, value = line.removeprefix("export ").partition("=")
                    extra[key] = shlex.split(value)[0] if value else ""
                engine_started = time.time()
                got = engine(vllm_args, prompt, {**offline, **extra})
                rows.setdefault((name, way), []).append(_parts(started, engine_started, got))
            shutil.rmtree(home, ignore_errors=True)
            prefix = f"s3://{BUCKET}/{bundled.store_key(m)}"
            streamer = {**offline, "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0"}
            started = time.time()
            got = engine(["--model", prefix, "--load-format", "runai_streamer"], prompt, streamer)
            rows.setdefault((name, "engine by itself from the bucket (runai)"), []).append(
                _parts(started, started, got)
            )
            shutil.rmtree(home, ignore_errors=True)
            started = time.time()
            got = engine(
                ["--model", m.source.hf_repo, "--revision", m.source.revision],
                prompt,
                {**engine_env, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1"},
            )  # the double serves no Xet
            rows.setdefault((name, "engine by itself from the Hub double (repo id)"), []).append(
                _parts(started, started, got)
            )
        print(f"  round {round_ + 1}/{args.runs} done", file=sys.stderr, flush=True)
    print(f"machine: {machine()}, {time.strftime('%Y-%m-%d')}\ntime to first token, {args.runs} rounds\n")
    print(
        "| model | way | to first token, median (min-max) | resolve | engine start + vLLM import | engine build (weights) "
        "| first token |\n|---|---|---|---|---|---|---|"
    )
    for (name, way), samples in rows.items():
        total = [s[0] for s in samples]
        parts = " | ".join(f"{statistics.median(s[i] for s in samples):.2f} s" for i in range(1, 5))
        print(f"| {name} | {way} | {statistics.median(total):.2f} s ({min(total):.2f}-{max(total):.2f} s) | {parts} |")


def _parts(started: float, engine_started: float, got: dict[str, float]) -> tuple[float, ...]:
    """(total, resolve, engine start + import, engine build, first token), seconds."""
    return (
        got["first_token"] - started,
        engine_started - started,
        got["imported"] - engine_started,
        got["ready"] - got["imported"],
        got["first_token"] - got["ready"],
    )


if __name__ == "__main__":
    main()
