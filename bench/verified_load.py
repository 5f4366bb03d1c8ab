"""Benchmark: vLLM's CPU build loading 1 GiB of weights (4 x 256 MiB safetensors) from SeaweedFS three ways.

    .venv/bin/python bench/verified_load.py [--runs 5] [--layers 16]

- `--load-format runai_streamer`: the engine streams the bucket's objects itself and verifies nothing;
- `--load-format catalog`: what `catalog resolve --format vllm-args` hands out for a streamed model: the package's
  loader streams the pinned spans with runai's reader and hashes every tensor before the model gets it;
- resolve to disk, then load: `catalog resolve --materialize-weights` into an empty cache (every byte verified on the
  way), then the engine's default loader reads the local folder.

The model is Llama-shaped (hidden 1024, 16 layers, float32, random weights), generated once, locked with
`catalog lock --from-dir` (which pins every tensor's digest) and synced into a bucket. Every round runs the three
ways in turn, each engine a fresh process under /usr/bin/time (its wall, CPU seconds and peak RSS, children
included); the engine runs in one process (VLLM_ENABLE_V1_MULTIPROCESSING=0, `--distributed-executor-backend uni`)
so the load's own time and CPU are read there: the CPU model runner's `load_model` (get_model: creating the model,
loading every weight, processing it) is timed from inside, with the process's CPU seconds before and after. The
resolve rows add the CLI's own time and CPU before the engine starts.
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
from seaweed import TIME, catalog, client, machine, start_server

BUCKET = "bench-verified"
NAME = "bench-1g"
HARNESS = ["--dtype", "float32", "--max-model-len", "64", "--enforce-eager", "--distributed-executor-backend", "uni"]
ENGINE_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0",
}
HIDDEN, INTERMEDIATE, HEADS, VOCAB = 1024, 4096, 8, 64


def child(spec: str) -> None:
    """The engine: build it from `args` with the model runner's load timed from inside; print the figures as JSON."""
    job = json.loads(spec)
    from vllm import LLM
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    measured: dict[str, float] = {}
    original = CPUModelRunner.load_model

    def timed_load(self: object, *args: object, **kwargs: object) -> object:
        cpu, started = _cpu(), time.perf_counter()
        result = original(self, *args, **kwargs)  # type: ignore[arg-type]
        measured.update(load=time.perf_counter() - started, load_cpu=_cpu() - cpu)
        return result

    CPUModelRunner.load_model = timed_load  # type: ignore[method-assign]
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())  # type: ignore[no-untyped-call]
    LLM.from_engine_args(EngineArgs.from_cli_args(parser.parse_args(job["args"])))
    print(json.dumps(measured))
    sys.stdout.flush()
    os._exit(0)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process (runai's and the hashers')
    return usage.ru_utime + usage.ru_stime


def make_model(folder: Path, layers: int) -> None:
    """A Llama-shaped float32 model: `layers` decoder layers in 4 shards plus an index, config and tokenizer."""
    import torch
    from safetensors.torch import save_file

    from resolver.examples import write_model

    tiny = write_model("tiny-llama", folder.parent / "tiny")
    folder.mkdir(parents=True)
    for path in tiny.iterdir():
        if path.name.startswith("tokenizer") or path.name == "special_tokens_map.json":
            shutil.copy(path, folder / path.name)
    config = json.loads((tiny / "config.json").read_text())
    config |= {
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": layers,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": HIDDEN // HEADS,
        "vocab_size": VOCAB,
        "torch_dtype": "float32",
        "tie_word_embeddings": False,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    generator = torch.Generator().manual_seed(0)

    def weight(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator) * 0.02

    shards = 4
    weight_map: dict[str, str] = {}
    for shard in range(shards):
        name = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        tensors: dict[str, torch.Tensor] = {}
        for layer in range(shard * layers // shards, (shard + 1) * layers // shards):
            p = f"model.layers.{layer}."
            for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                tensors[f"{p}self_attn.{proj}.weight"] = weight(HIDDEN, HIDDEN)
            tensors[f"{p}mlp.gate_proj.weight"] = weight(INTERMEDIATE, HIDDEN)
            tensors[f"{p}mlp.up_proj.weight"] = weight(INTERMEDIATE, HIDDEN)
            tensors[f"{p}mlp.down_proj.weight"] = weight(HIDDEN, INTERMEDIATE)
            tensors[f"{p}input_layernorm.weight"] = torch.ones(HIDDEN)
            tensors[f"{p}post_attention_layernorm.weight"] = torch.ones(HIDDEN)
        if shard == 0:
            tensors["model.embed_tokens.weight"] = weight(VOCAB, HIDDEN)
        if shard == shards - 1:
            tensors["model.norm.weight"] = torch.ones(HIDDEN)
            tensors["lm_head.weight"] = weight(VOCAB, HIDDEN)
        save_file(tensors, str(folder / name), metadata={"format": "pt"})
        weight_map |= dict.fromkeys(tensors, name)
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2)
    )


def write_catalog(root: Path, folder: Path) -> Path:
    manifests = root / "manifests"
    manifests.mkdir(parents=True)
    (manifests / "catalog.yaml").write_text(
        f"store: s3://{BUCKET}/\ndefault_gpu: cpu\ngpu_classes:\n  cpu: {{memory_gib: 64}}\n"
    )
    (manifests / f"{NAME}.yaml").write_text(
        f"name: {NAME}\nsource:\n  hf_repo: bench/{NAME}\n  revision: {'a' * 40}\n"
        f"s3_prefix: s3://{BUCKET}/bench/{NAME}/\nload_format: runai_streamer\ngpu: {{class: cpu}}\n"
    )
    done = subprocess.run(
        [*catalog(), "--catalog", str(manifests), "lock", NAME, "--from-dir", str(folder)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"catalog lock failed: {done.stderr}")
    return manifests


def engine(args: list[str], env: dict[str, str]) -> tuple[float, float, float, dict[str, float]]:
    """(wall, CPU s, peak RSS MiB, the load's own figures) of one engine process."""
    spec = json.dumps({"args": [*args, *HARNESS]})
    with tempfile.NamedTemporaryFile("r") as report:
        started = time.perf_counter()
        done = subprocess.run(
            [TIME, "-f", "%U %S %M", "-o", report.name, sys.executable, __file__, "--child", spec],
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"the engine failed on {args}: {done.stderr[-3000:]}")
        user, system, rss = report.read().split()[-3:]
    return wall, float(user) + float(system), int(rss) / 1024, json.loads(done.stdout.strip().splitlines()[-1])


def cli(argv: list[str], env: dict[str, str]) -> tuple[str, float, float]:
    """(stdout, wall, CPU s) of one catalog command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, time.perf_counter() - started, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    server, env = start_server()
    work = Path(tempfile.mkdtemp(prefix="catalog-bench-verified-"))
    try:
        folder = work / "model"
        make_model(folder, args.layers)
        manifests = write_catalog(work, folder)
        client(server.url).create_bucket(Bucket=BUCKET)
        base = [*catalog(), "--catalog", str(manifests)]
        store = f"s3://{BUCKET}/"
        subprocess.run(
            [*base, "sync", NAME, "--from-dir", str(folder), "--cache", str(work / "sync-cache")],
            env=env,
            check=True,
            capture_output=True,
        )
        weights = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
        run(args, base, store, env, work, weights)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, base: list[str], store: str, env: dict[str, str], work: Path, weights: int) -> None:
    home = work / "home"
    engine_env = {**env, **ENGINE_ENV, "HOME": str(home), "VLLM_CACHE_ROOT": str(home / "vllm")}
    rows: dict[str, list[tuple[float, ...]]] = {}
    stream_cache = work / "stream-cache"
    hashing: list[float] = []  # CPU seconds the verified loader's hashing threads spent, per run
    for round_ in range(args.runs):
        shutil.rmtree(home, ignore_errors=True)
        wall, cpu, rss, got = engine(
            ["--model", f"{store}bench/{NAME}/", "--load-format", "runai_streamer"], engine_env
        )
        rows.setdefault("runai_streamer (verifies nothing)", []).append(
            (got["load"], got["load_cpu"], 0.0, 0.0, wall, cpu, rss)
        )

        shutil.rmtree(home, ignore_errors=True)
        resolve = [*base, "resolve", NAME, "--store", store, "--cache", str(stream_cache), "--prefer", "stream"]
        printed, r_wall, r_cpu = cli([*resolve, "--format", "vllm-args"], env)
        exports, _, _ = cli([*resolve, "--format", "env"], env)
        extra = dict(line.removeprefix("export ").split("=", 1) for line in exports.splitlines())
        vllm_args = shlex.split(printed)
        assert vllm_args[vllm_args.index("--load-format") + 1] == "catalog", printed
        record = work / "load-record.jsonl"
        record.unlink(missing_ok=True)
        wall, cpu, rss, got = engine(
            vllm_args,
            {**engine_env, **{k: shlex.split(v)[0] for k, v in extra.items()}, "CATALOG_LOAD_RECORD": str(record)},
        )
        hashing.append(json.loads(record.read_text())["hash_seconds"])
        rows.setdefault("catalog (every tensor hashed)", []).append(
            (got["load"], got["load_cpu"], r_wall, r_cpu, wall, cpu, rss)
        )

        shutil.rmtree(home, ignore_errors=True)
        disk_cache = work / "disk-cache"
        shutil.rmtree(disk_cache, ignore_errors=True)
        printed, r_wall, r_cpu = cli(
            [
                *base,
                "resolve",
                NAME,
                "--store",
                store,
                "--cache",
                str(disk_cache),
                "--materialize-weights",
                "--format",
                "vllm-args",
            ],
            env,
        )
        wall, cpu, rss, got = engine(shlex.split(printed), engine_env)
        rows.setdefault("resolve to disk, then load", []).append(
            (got["load"], got["load_cpu"], r_wall, r_cpu, wall, cpu, rss)
        )
        print(f"  round {round_ + 1}/{args.runs} done", file=sys.stderr, flush=True)
    print(f"machine: {machine()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f}")
    print(
        f"{weights / 2**30:.2f} GiB of float32 weights in 4 safetensors shards, {args.runs} rounds, medians (min-max)\n"
    )
    ref = statistics.median(s[0] for s in rows["runai_streamer (verifies nothing)"])
    print(
        "| way | weights loaded (engine's load_model) | vs runai | load CPU s | resolve before the engine | "
        "resolve + load | engine process: CPU s, peak RSS |\n|---|---|---|---|---|---|---|"
    )
    for way, samples in rows.items():
        load = [s[0] for s in samples]
        total = [s[0] + s[2] for s in samples]
        med = statistics.median
        resolved = (
            f"{med(s[2] for s in samples):.2f} s, {med(s[3] for s in samples):.2f} CPU s" if samples[0][2] else "-"
        )
        print(
            f"| {way} | {med(load):.2f} s ({min(load):.2f}-{max(load):.2f}) | {med(load) / ref:.2f}x | "
            f"{med(s[1] for s in samples):.2f} | {resolved} | {med(total):.2f} s | "
            f"{med(s[5] for s in samples):.1f} s, {med(s[6] for s in samples):.0f} MiB |"
        )
    print(
        f"\nthe verified loader's hashing threads: {statistics.median(hashing):.2f} CPU s a load "
        f"({min(hashing):.2f}-{max(hashing):.2f}), {weights / 2**30 / statistics.median(hashing):.2f} GiB/s of one core"
    )


if __name__ == "__main__":
    main()
