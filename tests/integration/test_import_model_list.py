"""`catalog import --model-list FILE`: a model list with per-model engine flags and environment, in the shape of vLLM's
`.buildkite/amd-disagg/models.yaml` (a `models:` list of `model`, `env`, `base_flags`, per-role flags), becomes
locked manifests with engine profiles: from an HF cache that holds the model with zero Hub requests (counted by the
Hub double), from the Hub otherwise. What a profile cannot carry is said, and `catalog validate` passes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hubdouble import HubDouble

from catalog.errors import UsageError
from catalog.lookup import Catalog
from resolver.repo_list import parse_flags, parse_model_list

ROOT = Path(__file__).resolve().parents[2]

# A faithful sample: vLLM's list names a model by its folder under MODEL_DIR and splices the flag strings unquoted into
# `vllm serve`; per-role flag sets belong to the disaggregated launcher.
MODELS_YAML = """\
# =============================================================================
# Models of the disaggregated (P/D) CI. The launcher owns --host/--port and the topology flags.
# =============================================================================
models:
  - model: model-catalog/tiny-llama
    env:
      VLLM_CPU_KVCACHE_SPACE: "1"
      HF_HUB_OFFLINE: "1"
    base_flags: "--dtype float32 --max-model-len 64 --enforce-eager --trust-remote-code --port 8100"
    prefill:
      tp: "--gpu-memory-utilization 0.85"
    decode:
      tp: "--gpu-memory-utilization 0.85"

  - model: Qwen2-tiny
    hf_repo: model-catalog/tiny-qwen2
    gpu: l4
    base_flags: '--kv-cache-dtype auto --no-enable-prefix-caching --compilation-config {"cudagraph_mode":"PIECEWISE"}'
    experimental_flags: "--max-num-seqs 8"
"""


@pytest.fixture
def hub(bundled: Catalog, sources: dict[str, Path]) -> Iterator[HubDouble]:
    double = HubDouble()
    for name in ("tiny-llama", "tiny-qwen2"):
        m = bundled.get(name)
        double.add_repo(m.source.hf_repo, m.source.revision, sources[name])
    yield double
    double.close()


def hf_env(hub: HubDouble, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "CATALOG_"))}
    return env | {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(home / "hf-home"),
        "HOME": str(home),
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    }


def test_flags_become_profile_arguments() -> None:
    args, left_out = parse_flags(
        "--dtype float32 --max-model-len=4096 --enforce-eager --no-enable-prefix-caching "
        '--gpu_memory_utilization 0.85 --compilation-config {"level":0} --model x --port 1 stray'
    )
    assert args == {
        "dtype": "float32",
        "max-model-len": 4096,
        "enforce-eager": True,
        "enable-prefix-caching": False,
        "gpu-memory-utilization": 0.85,
        "compilation-config": {"level": 0},
    }
    assert left_out == [
        "--model: the catalog derives it from the manifest",
        "--port: the job's, not the model's",
        "'stray': a value without a flag",
    ]
    with pytest.raises(UsageError, match=r"models.yaml:3: unknown key\(s\) flagz"):
        parse_model_list("models:\n  - model: org/a\n  - model: org/b\n    flagz: x\n", "models.yaml", ["cpu"])
    with pytest.raises(UsageError, match=r"models.yaml:2: .*give `hf_repo:` for 'DeepSeek-V3'"):
        parse_model_list("models:\n  - model: DeepSeek-V3\n", "models.yaml", ["cpu"])


def test_a_model_list_becomes_manifests_with_profiles(hub: HubDouble, bundled: Catalog, tmp_path: Path) -> None:
    llama, qwen = bundled.get("tiny-llama"), bundled.get("tiny-qwen2")
    # The runner's HF cache, filled as CI fills it: huggingface_hub's own download of tiny-llama (not tiny-qwen2).
    home = tmp_path / "home"
    script = f"from huggingface_hub import snapshot_download; snapshot_download({llama.source.hf_repo!r})"
    filled = subprocess.run(
        [sys.executable, "-c", script],
        env=hf_env(hub, home) | {"HF_HUB_CACHE": str(home / "hub")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert filled.returncode == 0, filled.stderr[-2000:]
    hub.requests.clear()
    folder = tmp_path / "manifests"
    folder.mkdir()
    shutil.copy(ROOT / "manifests" / "catalog.yaml", folder)
    listing = tmp_path / "models.yaml"
    listing.write_text(MODELS_YAML)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "catalog",
                "--catalog",
                str(folder),
                "import",
                "--model-list",
                str(listing),
                "--from-hf-cache",
                str(home / "hub"),
                "--gpu",
                "cpu",
                *args,
            ],
            env=hf_env(hub, tmp_path),
            capture_output=True,
            text=True,
            timeout=300,
        )

    # The cached model alone first: not one request to the Hub.
    listing.write_text(MODELS_YAML.split("\n  - model: Qwen2-tiny")[0] + "\n")
    done = run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert hub.hub_requests() == 0, hub.requests
    data = yaml.safe_load((folder / "tiny-llama.yaml").read_text())
    assert data["source"]["revision"] == llama.source.revision and data["gpu"] == {"class": "cpu"}
    assert {f["path"]: f["sha256"] for f in data["files"]} == {f.path: f.sha256 for f in llama.files}
    assert data["profiles"] == {
        "cpu": {
            "args": {"dtype": "float32", "max-model-len": 64, "enforce-eager": True},
            "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
        }
    }
    said = done.stdout
    assert "from the HF cache, profile cpu; left out: --trust-remote-code: the catalog derives it" in said
    for what in (
        "--port: the job's",
        "prefill: per-role flags",
        "decode: per-role flags",
        "env HF_HUB_OFFLINE: set by the catalog",
    ):
        assert what in said, said
    # The whole list: tiny-llama is pinned already (its profile is not rewritten), tiny-qwen2 comes from the Hub.
    listing.write_text(MODELS_YAML)
    done = run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "skipped model-catalog/tiny-llama@main: already pinned as 'tiny-llama'; its profile is not rewritten"
        in done.stdout
    )
    assert hub.hub_requests() > 0 and all("tiny-qwen2" in r for r in hub.requests), hub.requests
    data = yaml.safe_load((folder / "tiny-qwen2.yaml").read_text())
    assert data["gpu"] == {"class": "l4"} and data["source"]["revision"] == qwen.source.revision
    assert data["profiles"] == {
        "l4": {
            "args": {
                "kv-cache-dtype": "auto",
                "enable-prefix-caching": False,
                "compilation-config": {"cudagraph_mode": "PIECEWISE"},
                "max-num-seqs": 8,
            }
        }
    }
    validate = subprocess.run(
        [sys.executable, "-m", "catalog", "--catalog", str(folder), "validate"],
        env=hf_env(hub, tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert validate.returncode == 0, validate.stdout + validate.stderr
