"""Engine profiles and the Hub guard with the engine itself (vLLM's CPU build here).

- A profile's arguments reach vLLM through `--format vllm-args` as printed, nothing added but `--enforce-eager` (a
  harness speed-up that computes the same): with tiny-llama's cpu profile (`--dtype float32 --max-model-len 64`) the
  engine says it runs in float32 with a 64-token context and its greedy tokens are transformers' float32 ones; without
  the profile (a runner of another class) the CPU build downcasts to bfloat16 and takes the model's whole context.
- A test that loads a bundled model by repo id, run by the plugin with CATALOG_MODE=ci, from a runner HF cache missing
  one pinned file: the engine's worker process asks the Hub, the guard refuses, and the test fails once naming the test,
  the repo, the file and the manifest line; the Hub (the session's counting double) gets no request. The suite's report
  lists every test's models.

A test file of its own: its session fixtures (one sync of the bundled models into a fresh bucket) are this file's
worker's (engine_support.py says how the engine tier is grouped)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from engine_support import MAX_TOKENS, PROMPTS, EngineSession, Reference, assert_matches
from hubdouble import HubDouble

from catalog import yamlsource
from catalog.lookup import Catalog
from resolver.loaders.vllm_engine import EngineJob

ROOT = Path(__file__).resolve().parents[2]
NAME = "tiny-llama"
HARNESS = ("--enforce-eager",)  # no graph compilation: the same computation, seconds instead of a minute


@pytest.fixture(scope="module")
def llama_reference(engine_session: EngineSession) -> Reference:
    """transformers' greedy tokens in float32 over tiny-llama's verified folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = engine_session.catalog("resolve", NAME).strip()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    ids = tokenizer(PROMPTS[NAME], return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False, min_new_tokens=MAX_TOKENS)
    return Reference(PROMPTS[NAME], tuple(ids[0].tolist()), tuple(out[0, ids.shape[1] :].tolist()))


def engine_configs(log: Path, start: int) -> list[tuple[str, int]]:
    """(dtype, max_seq_len) of every engine the worker built after byte `start` of its log, in order: vLLM's own
    account of the configuration it runs with."""
    text = log.read_bytes()[start:].decode(errors="replace")
    found = re.findall(r"Initializing a V1 LLM engine .*?\bdtype=torch\.(\w+).*?\bmax_seq_len=(\d+)", text)
    return [(dtype, int(length)) for dtype, length in found]


def test_a_profiles_arguments_reach_vllm_through_vllm_args(
    engine_session: EngineSession, llama_reference: Reference, empty_hub: HubDouble
) -> None:
    s = engine_session
    on_cpu = s.vllm_args(NAME, env={"CATALOG_GPU_CLASS": "cpu"})
    assert on_cpu[-4:] == ["--dtype", "float32", "--max-model-len", "64"]  # the profile, after the catalog's own
    elsewhere = s.vllm_args(NAME, env={"CATALOG_GPU_CLASS": "l4"})  # a class tiny-llama has no profile for
    assert "--dtype" not in elsewhere and "--max-model-len" not in elsewhere
    log = s.home / "engine.log"
    start = log.stat().st_size if log.exists() else 0
    results = s.run(
        [
            EngineJob("profile", (*on_cpu, *HARNESS), prompt=PROMPTS[NAME], max_tokens=MAX_TOKENS),
            EngineJob("no-profile", (*elsewhere, *HARNESS), prompt=PROMPTS[NAME], max_tokens=MAX_TOKENS),
        ]
    )
    assert_matches(results["profile"], llama_reference, served=NAME)
    assert results["no-profile"].ok
    # The engine ran with the profile's arguments; without them the CPU build downcasts the float32 weights to bfloat16
    # and takes the model's whole context (its greedy tokens happen to match here: the model decides by clear margins).
    assert engine_configs(log, start) == [("float32", 64), ("bfloat16", 128)]
    assert empty_hub.hub_requests() == 0


SUITE = """\
import os
from pathlib import Path

import pytest

from resolver.loaders.vllm_engine import EngineJob, run_jobs

ARGS = {args!r}


def test_loads_by_repo_id(tmp_path):
    job = EngineJob("by-repo-id", tuple(ARGS), prompt="w5 w6 w7", max_tokens=4)
    home = Path(os.environ["HOME"])
    [result] = run_jobs([job], env={{"VLLM_CACHE_ROOT": str(home / "vllm"), "HF_HUB_DISABLE_TELEMETRY": "1"}},
                        log=Path("engine.log"), timeout=900)
    assert result.ok, result.error


@pytest.mark.catalog_model("tiny-llama")
def test_marked(catalog_resolution):
    assert catalog_resolution.name == "tiny-llama"
"""


def test_a_repo_id_load_missing_a_pinned_file_fails_in_the_guard(
    engine_session: EngineSession, bundled: Catalog, empty_hub: HubDouble, tmp_path: Path
) -> None:
    s = engine_session
    llama = bundled.get(NAME)
    snapshot_env = s.exported("resolve", NAME, "--layout", "hf-cache")
    runner_hf = tmp_path / "runner-hf"  # this runner's HF cache: the catalog's snapshot, one pinned file gone
    shutil.copytree(snapshot_env["HF_HUB_CACHE"], runner_hf, symlinks=True)
    (runner_hf / "models--model-catalog--tiny-llama" / "snapshots" / llama.source.revision / "tokenizer.json").unlink()
    args = [*s.vllm_args(NAME, "--layout", "hf-cache", env={"CATALOG_GPU_CLASS": "cpu"}), *HARNESS]
    assert args[:4] == ["--model", llama.source.hf_repo, "--revision", llama.source.revision]  # by repo id, at the pin
    project = tmp_path / "project"
    shutil.copytree(ROOT / "manifests", project / "manifests")
    (project / "test_models.py").write_text(textwrap.dedent(SUITE.format(args=args)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "CATALOG_"))}
    env |= {
        "CATALOG_MODE": "ci",
        "CATALOG_DIR": str(project / "manifests"),
        "CATALOG_STORE": s.store,
        "CATALOG_CACHE": str(s.cache),
        "CATALOG_GPU_CLASS": "cpu",
        "HF_ENDPOINT": empty_hub.url,
        "HF_HUB_CACHE": str(runner_hf),
        "HF_HOME": str(tmp_path / "hf"),
        "HOME": str(s.home),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--catalog-report",
            "report.json",
            "test_models.py",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    out = done.stdout
    assert out.strip().splitlines()[-1].startswith("1 failed, 1 passed"), out + done.stderr  # once: no rerun
    failure = out.split("_ test_loads_by_repo_id _", 1)[1].split("\n=====", 1)[0]
    index = [f.path for f in llama.files].index("tokenizer.json")
    line = yamlsource.parse((ROOT / "manifests" / f"{NAME}.yaml").read_text()).lines.line_of(("files", index, "path"))
    assert (
        f"catalog hub guard: model-catalog/tiny-llama@{llama.source.revision[:12]}: this runner's HF cache ({runner_hf}) "
        f"lacks tokenizer.json (manifests/tiny-llama.yaml:{line})"
    ) in failure, failure
    assert "test_models.py::test_loads_by_repo_id asked the Hub" in failure  # the engine's worker asked; refused
    assert empty_hub.hub_requests() == 0, empty_hub.requests  # nothing reached the Hub
    report = {t["test"].split("::")[1]: t for t in json.loads((project / "report.json").read_text())["tests"]}
    assert [(m["name"], m["via"]) for m in report["test_loads_by_repo_id"]["models"]] == [(NAME, "repo id")]
    assert [(m["name"], m["via"]) for m in report["test_marked"]["models"]] == [(NAME, "marker")]
    assert report["test_loads_by_repo_id"]["guarded"] and report["test_loads_by_repo_id"]["outcome"] == "failed"
