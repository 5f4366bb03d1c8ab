"""The engine in a process of its own: vLLM loads models exactly as `catalog resolve --format vllm-args` says.

    python -m resolver.loaders.vllm_worker JOBS.json RESULTS.jsonl

JOBS.json: {"env": {...}, "jobs": [{"id", "args": [vLLM command-line arguments], "prompt", "max_tokens", "env": {...}}]}.
Each job's arguments go through vLLM's own argument parser (so they are checked as `vllm serve` would check
them), the engine is built from them, and it generates greedily from `prompt` (or embeds it, for a pooling
model). One JSON line per job is appended to RESULTS.jsonl as soon as it is known: {"id", "ok", "error",
"served_model_name", "runner", "prompt_token_ids", "token_ids", "text", "embedding", "seconds", "compile"}, where
"compile" holds the engine's own compile-cache counters for that job (torch inductor's FX-graph and AOTAutograd cache
hits and misses, vLLM's compilation counters; empty when the engine compiled nothing, e.g. with --enforce-eager).
vLLM logs to stdout and stderr, so results never go there.

A process of its own because vLLM spawns processes (a spawned child re-imports `__main__`), sets process-wide
state, and reads HF_HUB_CACHE/HF_HUB_OFFLINE when huggingface_hub is imported: a caller gives each group of jobs
its environment by starting a worker with it. Jobs run one after the other in this process (no engine process of
its own unless the model needs several ranks), so vLLM is imported once per worker.

On vLLM's CPU build (checked with 0.32) the worker also sets what a CPU needs and cannot guess:
- VLLM_CPU_KVCACHE_SPACE=1 (GiB) unless set: the default would take memory a load check does not need;
- for N tensor-parallel ranks, VLLM_CPU_OMP_THREADS_BIND splitting this process's cores into N groups and
  VLLM_CPU_NUM_OF_RESERVED_CPU=0, unless set: the automatic binding wants a NUMA node per rank;
- the tensorizer loader's `process_weights_after_loading`, which that build never calls on the path that loads a
  Hugging Face state dict ("'QKVParallelLinear' object has no attribute 'cpu_linear'" otherwise): called after
  the load, as the other loaders do. A workaround of vLLM's bug, said here and in the result (`patched`).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

CPU_PATCHES = ("tensorizer: process_weights_after_loading after a Hugging Face state dict load (vLLM 0.32 CPU build)",)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:600]}"


def _option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _cpu_environment(ranks: int) -> None:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if ranks > 1 and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        cores = sorted(os.sched_getaffinity(0))
        per = max(1, len(cores) // ranks)
        groups = [cores[i * per : (i + 1) * per] or cores[-1:] for i in range(ranks)]
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(",".join(map(str, g)) for g in groups)
        os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")


def _patch_cpu_tensorizer() -> None:
    import vllm.model_executor.model_loader.tensorizer_loader as loader
    from vllm.model_executor.model_loader.utils import process_weights_after_loading

    original = loader.TensorizerLoader._load_model_serialized_cpu  # noqa: SLF001 - the method this patch wraps
    if getattr(original, "catalog_patched", False):
        return

    def load_then_process(self: Any, vllm_config: Any, prefix: str = "") -> Any:
        model = original(self, vllm_config=vllm_config, prefix=prefix)
        process_weights_after_loading(model, vllm_config.model_config, vllm_config.device_config.device)
        return model

    load_then_process.catalog_patched = True  # type: ignore[attr-defined]
    setattr(loader.TensorizerLoader, "_load_model_serialized_cpu", load_then_process)  # noqa: B010 - a patch


def _compile_counters() -> dict[str, int]:
    """The compile-cache counters of this process so far: torch's (inductor's FX-graph cache, the AOTAutograd cache)
    and vLLM's compilation counter. Read, never reset: a job reports its own share as a difference."""
    counted: dict[str, int] = {}
    dynamo = sys.modules.get("torch._dynamo.utils")
    if dynamo is not None:
        for group in ("inductor", "aot_autograd"):
            counted |= {f"{group}.{k}": int(v) for k, v in dynamo.counters[group].items() if "cache" in k}
    vllm_counter = sys.modules.get("vllm.compilation.counter")
    if vllm_counter is not None:
        counted |= {
            f"vllm.{k}": int(v) for k, v in vars(vllm_counter.compilation_counter).items() if isinstance(v, int)
        }
    return counted


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    from vllm import LLM, SamplingParams
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    result: dict[str, Any] = {"id": job["id"], "ok": False, "patched": []}
    args = list(job["args"])
    ranks = int(_option(args, "--tensor-parallel-size") or 1)
    saved = dict(os.environ)
    os.environ.update(job.get("env") or {})
    started = time.perf_counter()
    before = _compile_counters()
    llm = None
    try:
        if current_platform.is_cpu():
            _cpu_environment(ranks)
            if _option(args, "--load-format") == "tensorizer":
                _patch_cpu_tensorizer()
                result["patched"] = list(CPU_PATCHES)
        if ranks == 1 and _option(args, "--distributed-executor-backend") is None:
            args += ["--distributed-executor-backend", "uni"]  # in this process: no engine process per job
        parser = EngineArgs.add_cli_args(FlexibleArgumentParser())  # type: ignore[no-untyped-call]
        engine_args = EngineArgs.from_cli_args(parser.parse_args(args))
        llm = LLM.from_engine_args(engine_args)
        config = llm.llm_engine.model_config
        result |= {"served_model_name": config.served_model_name, "runner": config.runner_type}
        prompt = str(job.get("prompt", "hello world"))
        if config.runner_type == "pooling":
            embedded = llm.embed([prompt])[0]
            result |= {
                "prompt_token_ids": list(embedded.prompt_token_ids),
                "embedding": list(embedded.outputs.embedding),
            }
        else:
            out = llm.generate([prompt], SamplingParams(max_tokens=int(job.get("max_tokens", 8)), temperature=0))[0]
            result |= {
                "prompt_token_ids": list(out.prompt_token_ids or []),
                "token_ids": list(out.outputs[0].token_ids),
                "text": out.outputs[0].text,
            }
        result["ok"] = True
    except SystemExit as exc:  # argparse refusing an argument exits; the message went to stderr
        result["error"] = f"vLLM refused the arguments {args} (exit {exc.code}); see its message above"
    except Exception as exc:  # noqa: BLE001 - whatever the engine raises is the engine's verdict on the model
        result["error"] = _one_line(exc)
        traceback.print_exc(file=sys.stderr)
    finally:
        result["seconds"] = round(time.perf_counter() - started, 3)
        result["compile"] = {k: v - before.get(k, 0) for k, v in _compile_counters().items() if v != before.get(k, 0)}
        if llm is not None:
            _shut_down(llm)
        os.environ.clear()
        os.environ.update(saved)
    return result


def _shut_down(llm: Any) -> None:
    """Free the engine before the next job (its KV cache and, with several ranks, its processes)."""
    import gc

    engine = getattr(llm, "llm_engine", None)
    shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
    if callable(shutdown):
        try:
            shutdown()
        except Exception:  # noqa: BLE001 - a failing shutdown must not fail the next job
            traceback.print_exc(file=sys.stderr)
    del llm
    gc.collect()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m resolver.loaders.vllm_worker JOBS.json RESULTS.jsonl", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    os.environ.update(spec.get("env") or {})  # before vLLM or huggingface_hub is imported: they read some of it once
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
    jobs = spec["jobs"]
    with open(argv[1], "a", encoding="utf-8") as results:
        for job in jobs:
            results.write(json.dumps(run_job(job)) + "\n")
            results.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
