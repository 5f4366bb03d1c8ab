"""Benchmark: time to the engine's first token with vLLM's compile cache restored by the catalog, against a cold
compile and against a runner whose engine cache is already warm.

    .venv/bin/python bench/compile_cache.py [--runs 5] [--model tiny-llama]

The model is generated (resolver/examples.py) and synced into two SeaweedFS buckets with `catalog sync --from-dir`:
one where a first runner published the model's compile cache (`catalog derived publish`, before the rounds) and one
where nothing derived is stored. The engine is vLLM's CPU build, driven as resolver/loaders/vllm_worker.py drives it
(one process: VLLM_ENABLE_V1_MULTIPROCESSING=0, the uni executor, VLLM_CPU_KVCACHE_SPACE=1, float32, a 64-token
context) and compiling (no --enforce-eager, except in the last row); each run is a fresh process that builds the
engine and generates one greedy token. Every round runs every way once, in turn:

- empty runner, nothing stored: a fresh catalog cache and engine cache folder; `resolve`, `derived restore` (a miss),
  the engine compiles;
- empty runner, restored: the same, against the bucket holding the entry (`derived restore` downloads and verifies it);
- warm runner: the catalog cache and engine cache folder of this way's previous run (warmed once before the rounds);
  `resolve` and `derived restore` find everything in place;
- vLLM's defaults, warm: no catalog environment (VLLM_CACHE_ROOT of its own, vLLM's AOT compile on), its engine cache
  warmed before the rounds: what a runner keeping its own cache gets without the catalog (on this build the AOT
  artifact fails to load and vLLM compiles again from inductor's cache);
- eager: `--enforce-eager`, nothing compiled (the floor of any compiled start);
- the engine by itself: no catalog at all, vLLM fetching the model from the bucket with its own streamer
  (`--model s3://bucket/prefix/ --load-format runai_streamer`, which verifies nothing) into a fresh engine cache
  folder, compiling: what a runner without the catalog gets on a fresh machine.

`--ways` picks some of them (by the short names in WAY_NAMES; the warm runner is always run: the ratios are to it).
Every engine start has its own inductor and Triton cache folders (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR inside
its runner's folder): vLLM points inductor into its own cache folder when it compiles, but torch may fill its default
(/tmp/torchinductor_$USER) at import, and a folder shared across starts would warm one round's cold compile with
another's work. The 1-minute load average at each round's start is printed with the table (a shared machine).

A row's time runs from the first command to the token, split into the catalog's part (resolve + restore), the engine
process's start and vLLM's import, building the engine (where compiling happens) and the first token; CPU seconds are
those of every process the row ran (the catalog's and the engine's, from wait4), the server's apart.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from seaweed import ROOT, catalog, client, machine, process_cpu, start_server

BUCKETS = ("bench-derived", "bench-empty")

PROMPTS = {"tiny-llama": "w5 w6 w7", "tiny-qwen2": "hello world the model"}
HARNESS = ["--dtype", "float32", "--max-model-len", "64", "--distributed-executor-backend", "uni"]
ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
WAYS = (
    "empty runner, nothing stored (cold compile)",
    "empty runner, compile cache restored",
    "warm runner (its own engine cache)",
    "vLLM's defaults, warm engine cache (no catalog)",
    "eager (--enforce-eager), no compile",
    "engine by itself from the bucket (runai_streamer), fresh engine cache",
)
WAY_NAMES = dict(zip(("cold", "restored", "warm", "defaults", "eager", "itself"), WAYS, strict=True))


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


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:6])} ... failed ({done.returncode}): {done.stderr[-3000:]}")
    return done.stdout


def exports(text: str) -> dict[str, str]:
    pairs = (line.removeprefix("export ").partition("=") for line in text.splitlines())
    return {key: shlex.split(value)[0] if value else "" for key, _, value in pairs}


class Runner:
    """One CI runner: a catalog cache and an engine cache folder, a store, and a way to start the engine."""

    def __init__(self, base: list[str], store: str, folder: Path, env: dict[str, str], prompt: str, name: str) -> None:
        self.base, self.store, self.folder, self.env, self.prompt, self.name = base, store, folder, env, prompt, name

    def start(self, *, restore: bool = True, eager: bool = False, by_itself: str | None = None) -> dict[str, float]:
        """resolve (+ restore) then the engine; the parts of the time to its first token, and the CPU seconds. With
        `by_itself` (the model's s3:// prefix), no catalog: the engine streams the model from there by itself."""
        cpu_before = children_cpu()
        started = time.time()
        cache, engine_cache = self.folder / "catalog-cache", self.folder / "vllm-cache"
        store = ["--store", self.store, "--cache", str(cache)]
        if by_itself:
            args = ["--model", by_itself, "--load-format", "runai_streamer"]
            restore = False
        else:
            args = shlex.split(run([*self.base, "resolve", self.name, *store, "--format", "vllm-args"], self.env))
        engine_args = [*args, *HARNESS, *(["--enforce-eager"] if eager else [])]
        # This runner's own inductor and Triton folders: no start compiles with another start's leftovers.
        env = {
            **self.env,
            **ENGINE_ENV,
            "HOME": str(self.folder / "home"),
            "VLLM_CACHE_ROOT": str(engine_cache),
            "TORCHINDUCTOR_CACHE_DIR": str(self.folder / "inductor"),
            "TRITON_CACHE_DIR": str(self.folder / "triton"),
            **({"RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0"} if by_itself else {}),
        }
        hit = 0.0
        if restore:
            said = exports(
                run(
                    [
                        *self.base,
                        "derived",
                        "restore",
                        self.name,
                        *store,
                        "--engine-cache",
                        str(engine_cache),
                        "--format",
                        "env",
                        "--",
                        *engine_args,
                    ],
                    self.env,
                )
            )
            env |= {k: v for k, v in said.items() if not k.startswith("CATALOG_")}
            hit = float(said["CATALOG_DERIVED_HIT"])
        engine_started = time.time()
        spec = json.dumps({"args": engine_args, "prompt": self.prompt})
        got = json.loads(run([sys.executable, __file__, "--child", spec], env).strip().splitlines()[-1])
        return {
            "total": got["first_token"] - started,
            "catalog": engine_started - started,
            "import": got["imported"] - engine_started,
            "build": got["ready"] - got["imported"],
            "token": got["first_token"] - got["ready"],
            "cpu": children_cpu() - cpu_before,
            "hit": hit,
            "token_id": float(got["token_ids"][0]),
        }

    def publish(self) -> None:
        run(
            [
                *self.base,
                "derived",
                "publish",
                self.name,
                "--store",
                self.store,
                "--cache",
                str(self.folder / "catalog-cache"),
                "--engine-cache",
                str(self.folder / "vllm-cache"),
            ],
            self.env,
        )

    def wipe(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--model", default="tiny-llama", choices=sorted(PROMPTS))
    parser.add_argument(
        "--ways",
        nargs="+",
        choices=sorted(WAY_NAMES),
        default=list(WAY_NAMES),
        help="which ways to run each round (the warm runner always runs: the ratios are to it)",
    )
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    from resolver.examples import write_model

    server, env = start_server()
    work = Path(tempfile.mkdtemp(prefix="catalog-bench-compile-"))
    try:
        source = write_model(args.model, work / "sources")
        base = [*catalog(), "--catalog", str(ROOT / "manifests")]
        s3 = client(server.url)
        for bucket in BUCKETS:
            s3.create_bucket(Bucket=bucket)
            run(
                [
                    *base,
                    "sync",
                    args.model,
                    "--store",
                    f"s3://{bucket}/",
                    "--from-dir",
                    str(source),
                    "--cache",
                    str(work / "sync-cache"),
                ],
                env,
            )
        measure(args, base, env, server.process.pid if server.process else None, work)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def measure(args: argparse.Namespace, base: list[str], env: dict[str, str], server_pid: int | None, work: Path) -> None:
    import catalog as catalog_lib

    prompt = PROMPTS[args.model]
    ways = [way for name, way in WAY_NAMES.items() if name in args.ways or name == "warm"]
    bundled = catalog_lib.load(ROOT / "manifests")
    prefix = f"s3://{BUCKETS[1]}/{bundled.store_key(bundled.get(args.model))}"  # where `sync` put it

    def runner(folder: str, bucket: str) -> Runner:
        made = Runner(base, f"s3://{bucket}/", work / folder, env, prompt, args.model)
        made.wipe()
        return made

    print("setup: a first runner compiles and publishes; the warm runners warm up", file=sys.stderr, flush=True)
    publisher = runner("publisher", "bench-derived")
    publisher.start()
    publisher.publish()
    warm = runner("warm", "bench-empty")  # warms its own engine cache by compiling, as a runner alone would
    warm.start()
    plain = runner("vllm-defaults", "bench-empty")
    if WAYS[3] in ways:
        plain.start(restore=False)
    samples: dict[str, list[dict[str, float]]] = {way: [] for way in ways}
    server: dict[str, list[float]] = {way: [] for way in ways}
    loads = []
    for round_ in range(args.runs):
        loads.append(os.getloadavg()[0])
        for way in ways:
            before = process_cpu(server_pid) if server_pid else 0.0
            if way == WAYS[0]:
                got = runner("cold", "bench-empty").start()
            elif way == WAYS[1]:
                got = runner("restored", "bench-derived").start()
            elif way == WAYS[2]:
                got = warm.start()
            elif way == WAYS[3]:
                got = plain.start(restore=False)
            elif way == WAYS[4]:
                got = runner("eager", "bench-empty").start(restore=False, eager=True)
            else:
                got = runner("itself", "bench-empty").start(by_itself=prefix)
            samples[way].append(got)
            server[way].append(process_cpu(server_pid) - before if server_pid else 0.0)
        print(f"  round {round_ + 1}/{args.runs} done (load {loads[-1]:.2f} at its start)", file=sys.stderr, flush=True)
    print(json.dumps(samples), file=sys.stderr)  # the raw samples, whatever the checks below say
    print(
        f"machine: {machine()}, no GPU, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"time to first token, {args.model}, {args.runs} rounds, medians (min-max)\n"
        f"load average (1 min) at each round's start: {', '.join(f'{x:.1f}' for x in loads)}\n"
    )
    warm_median = statistics.median(s["total"] for s in samples[WAYS[2]])
    print(
        "| way | to first token | vs warm runner | catalog (resolve + restore) | engine start + vLLM import "
        "| engine build (compile) | first token | CPU s | server CPU s |\n|---|---|---|---|---|---|---|---|---|"
    )
    for way in ways:
        rows = samples[way]
        total = [s["total"] for s in rows]
        part = " | ".join(
            f"{statistics.median(s[k] for s in rows):.2f} s" for k in ("catalog", "import", "build", "token")
        )
        print(
            f"| {way} | {statistics.median(total):.2f} s ({min(total):.2f}-{max(total):.2f} s) | "
            f"{statistics.median(total) / warm_median:.2f}x | {part} | {statistics.median(s['cpu'] for s in rows):.1f} | "
            f"{statistics.median(server[way]):.2f} |"
        )
    tokens = {s["token_id"] for way in ways for s in samples[way]}
    assert len(tokens) == 1, f"the ways disagree on the first token: {tokens}"
    assert all(s["hit"] == 1.0 for s in samples.get(WAYS[1], [])), "a restore missed"
    assert all(s["hit"] == 0.0 for s in samples.get(WAYS[0], []) + samples[WAYS[2]]), (
        "a restore hit where nothing is stored"
    )


if __name__ == "__main__":
    main()
