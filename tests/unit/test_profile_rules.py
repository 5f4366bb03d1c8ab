"""Engine profiles, ready-time budgets and baselines in the manifest: the `profile` and `baseline` rules (each with a
failing and a passing manifest, at the exact file:line), the profile's rendering and merge into the engine's
arguments and environment, `--format env`, and `catalog matrix --format buildkite`."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import SHA, files_yaml, manifest_text, write_catalog

import catalog
from catalog.errors import Problem
from catalog.formats import LoadFormat
from catalog.loading import load_dir
from catalog.matrix import buildkite_steps, gpu_matrix
from catalog.schema import EngineProfile
from catalog_app import outputs
from resolver.profiles import Profile, merge_args, profile_of, with_profile
from resolver.resolution import Resolution, engine_args, engine_env
from resolver.views import Layout


def problems_of(tmp_path: Path, manifests: dict[str, str]) -> list[Problem]:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        return load_dir(write_catalog(tmp_path, manifests)).problems


def found(problems: list[Problem]) -> list[str]:
    return [f"{p.path}:{p.line}: {p.rule}: {p.field}" for p in problems]


PROFILE = """\
profiles:
  cpu:
    args:
      dtype: float32
      max-model-len: 64
      enforce-eager: true
    env:
      VLLM_CPU_KVCACHE_SPACE: "1"
    ready_budget_s: 120
"""


def test_a_profile_per_known_class_is_valid(tmp_path: Path) -> None:
    assert problems_of(tmp_path, {"tiny.yaml": manifest_text(extra=PROFILE)}) == []


@pytest.mark.parametrize(
    ("edit", "line", "field", "says"),
    [
        (("cpu:", "h100:"), 9, "profiles.h100", "'h100' is not a GPU class of catalog.yaml; known: cpu, h200, l4"),
        (
            ("dtype:", "--dtype:"),
            11,
            "profiles.cpu.args.--dtype",
            "write 'dtype': argument names go without their dashes",
        ),
        (("max-model-len:", "max_model_len:"), 12, "profiles.cpu.args.max_model_len", "('max-model-len')"),
        (
            ("enforce-eager: true", "load-format: pt"),
            13,
            "profiles.cpu.args.load-format",
            "--load-format is derived from the manifest by `catalog resolve`",
        ),
        (
            ("enforce-eager: true", "tensor-parallel-size: 2"),
            10,
            "profiles.cpu.args",
            "tensor x pipeline parallel size is 2 ranks but gpu.count is 1",
        ),
        (
            ("enforce-eager: true", "tensor-parallel-size: two"),
            13,
            "profiles.cpu.args.tensor-parallel-size",
            "a whole number of ranks",
        ),
        (
            ("VLLM_CPU_KVCACHE_SPACE", "HF_HUB_OFFLINE"),
            15,
            "profiles.cpu.env.HF_HUB_OFFLINE",
            "set by the catalog or the store",
        ),
        (("VLLM_CPU_KVCACHE_SPACE", "VLLM_API_KEY"), 15, "profiles.cpu.env.VLLM_API_KEY", "named like a credential"),
    ],
)
def test_the_profile_rule(tmp_path: Path, edit: tuple[str, str], line: int, field: str, says: str) -> None:
    text = manifest_text(extra=PROFILE.replace(*edit))
    problems = problems_of(tmp_path, {"tiny.yaml": text})
    assert found(problems) == [f"manifests/tiny.yaml:{line}: profile: {field}"]
    assert says in problems[0].message


def test_a_dataset_has_no_profile(tmp_path: Path) -> None:
    data = manifest_text("data", fmt="dataset", extra=PROFILE).replace(
        "  revision:", "  repo_type: dataset\n  revision:", 1
    )
    assert found(problems_of(tmp_path, {"data.yaml": data})) == ["manifests/data.yaml:9: profile: profiles"]


def test_a_per_rank_format_keeps_its_own_tensor_parallel_size(tmp_path: Path) -> None:
    shards = files_yaml(
        ("model-rank-0-part-0.safetensors", 10, SHA),
        ("model-rank-1-part-0.safetensors", 10, "b" * 64),
        ("tokenizer.json", 1, "c" * 64),
    )
    text = manifest_text(
        fmt="runai_streamer_sharded",
        files=shards,
        extra=PROFILE.replace("enforce-eager: true", "tensor-parallel-size: 2"),
    )
    text = text.replace("gpu: {class: cpu}", "gpu: {class: cpu, count: 2}")
    problems = problems_of(tmp_path, {"tiny.yaml": text})
    assert found(problems) == ["manifests/tiny.yaml:13: profile: profiles.cpu.args.tensor-parallel-size"]
    assert "one shard per rank" in problems[0].message


DATA = manifest_text("sts", fmt="dataset", files=files_yaml(("data/test.jsonl", 5, SHA))).replace(
    "  revision:", "  repo_type: dataset\n  revision:", 1
)
BASELINE = """\
baselines:
  - metric: spearman
    dataset: sts
    split: test
    value: 0.8
    tolerance: 0.02
"""


def test_a_baseline_on_a_pinned_dataset_is_valid(tmp_path: Path) -> None:
    assert problems_of(tmp_path, {"tiny.yaml": manifest_text(extra=BASELINE), "sts.yaml": DATA}) == []


def test_a_baseline_on_an_unpinned_dataset_fails_validate_at_its_line(tmp_path: Path) -> None:
    problems = problems_of(
        tmp_path, {"tiny.yaml": manifest_text(extra=BASELINE.replace("dataset: sts", "dataset: stsb"))}
    )
    assert found(problems) == ["manifests/tiny.yaml:10: baseline: baselines[0].dataset"]
    assert (
        "'stsb' is not a manifest in the catalog: a baseline on unpinned data moves when the data does"
        in problems[0].message
    )
    # A dataset manifest without its files pinned is no pin either, nor is a model.
    unlocked = DATA.split("files:")[0] + "files: []\n"
    problems = problems_of(tmp_path, {"tiny.yaml": manifest_text(extra=BASELINE), "sts.yaml": unlocked})
    assert "manifests/tiny.yaml:10: baseline: baselines[0].dataset" in found(problems)
    assert any("the dataset 'sts' (manifests/sts.yaml:5) is not pinned" in p.message for p in problems)
    problems = problems_of(
        tmp_path,
        {
            "tiny.yaml": manifest_text(extra=BASELINE.replace("dataset: sts", "dataset: other")),
            "other.yaml": manifest_text("other"),
        },
    )
    assert [p.message.split(" (")[0] for p in problems if p.rule == "baseline"] == ["'other'"]


def test_a_baseline_of_an_unlocked_model_or_twice_is_refused(tmp_path: Path) -> None:
    twice = BASELINE + BASELINE.split("\n", 1)[1]
    problems = problems_of(tmp_path, {"tiny.yaml": manifest_text(extra=twice), "sts.yaml": DATA})
    assert found(problems) == ["manifests/tiny.yaml:14: baseline: baselines[1]"]
    assert "is also baselines[0]" in problems[0].message
    unlocked = manifest_text(extra=BASELINE, files="").replace("files:\n", "files: []\n")
    problems = problems_of(tmp_path, {"tiny.yaml": unlocked, "sts.yaml": DATA})
    assert "manifests/tiny.yaml:8: baseline: baselines" in found(problems)


def test_a_profile_renders_in_the_manifests_order_and_vllms_spelling() -> None:
    profile = EngineProfile(
        args={
            "dtype": "float32",
            "max-model-len": 64,
            "enforce-eager": True,
            "enable-prefix-caching": False,
            "gpu-memory-utilization": 0.85,
            "compilation-config": {"level": 0, "custom_ops": ["+quant_fp8"], "size": "8g"},
        }
    )
    assert profile.command_line() == (
        "--dtype",
        "float32",
        "--max-model-len",
        "64",
        "--enforce-eager",
        "--no-enable-prefix-caching",
        "--gpu-memory-utilization",
        "0.85",
        "--compilation-config.level=0",
        '--compilation-config.custom_ops=["+quant_fp8"]',
        '--compilation-config.size="8g"',
    )


def test_the_profile_wins_over_any_argument_it_sets() -> None:
    base = ["--model", "/m", "--max-model-len", "32", "--enforce-eager", "--dtype=auto", "--load-format", "safetensors"]
    assert merge_args(base, ["--max-model-len", "64", "--no-enforce-eager", "--dtype", "float32"]) == [
        "--model",
        "/m",
        "--load-format",
        "safetensors",
        "--max-model-len",
        "64",
        "--no-enforce-eager",
        "--dtype",
        "float32",
    ]
    assert merge_args(base, []) == base


def _resolution(**kw: object) -> Resolution:
    base: dict[str, object] = dict(
        name="m",
        hf_repo="org/m",
        revision="a" * 40,
        load_format=LoadFormat.SAFETENSORS,
        model="/cache/models/m/x",
        path=Path("/cache/models/m/x"),
        tokenizer=None,
        files=("config.json",),
        streamed=(),
        bytes=1,
        source="cache",
        layout=Layout.DIR,
        hub_cache=None,
        loader={},
        stream_env={},
    )
    base.update(kw)
    return Resolution(**base)  # type: ignore[arg-type]


def test_the_runners_class_picks_the_profile_engine_args_and_env_carry(bundled: catalog.Catalog) -> None:
    llama = bundled.get("tiny-llama")
    assert profile_of(llama, "l4") is None and profile_of(llama, None) is None
    plain = _resolution(name="tiny-llama")
    on_cpu = with_profile(plain, llama, "cpu")
    assert on_cpu.profile == Profile("cpu", ("--dtype", "float32", "--max-model-len", "64"), {}, 300)
    assert engine_args(on_cpu) == engine_args(plain) + ["--dtype", "float32", "--max-model-len", "64"]
    assert with_profile(plain, llama, "l4").profile is None
    env = _resolution(profile=Profile("cpu", (), {"VLLM_CPU_KVCACHE_SPACE": "2"}))
    assert engine_env(env) == {"VLLM_CPU_KVCACHE_SPACE": "2"}
    assert on_cpu.to_json()["profile"] == {
        "gpu_class": "cpu",
        "args": ["--dtype", "float32", "--max-model-len", "64"],
        "env": {},
        "ready_budget_s": 300,
    }


def test_format_env_refuses_two_profiles_disagreeing_on_a_variable() -> None:
    one = _resolution(name="a", profile=Profile("cpu", (), {"VLLM_X": "1"}))
    same = _resolution(name="b", profile=Profile("cpu", (), {"VLLM_X": "1"}))
    other = _resolution(name="c", profile=Profile("cpu", (), {"VLLM_X": "2"}))
    assert "export VLLM_X=1" in outputs.render([one, same], "env")
    with pytest.raises(outputs.OutputError, match="the profiles of a and c set VLLM_X differently"):
        outputs.render([one, other], "env")


def test_the_buildkite_matrix_carries_each_models_profile_and_budget(bundled: catalog.Catalog) -> None:
    table = gpu_matrix(bundled, "cpu")
    llama = next(m for m in table["cpu"] if m["name"] == "tiny-llama")
    assert llama["profile"] == {
        "args": ["--dtype", "float32", "--max-model-len", "64"],
        "env": {},
        "ready_budget_s": 300,
    }
    steps = buildkite_steps(table)["steps"]
    assert steps[0]["key"] == "catalog-prewarm-cpu" and steps[0]["env"]["CATALOG_GPU_CLASS"] == "cpu"
    jobs = {s["key"]: s for s in steps[1:]}
    assert set(jobs) == {
        "catalog-cpu-tiny-llama",
        "catalog-cpu-tiny-llama-sharded",
        "catalog-cpu-tiny-llama-tensorizer",
        "catalog-cpu-tiny-qwen2",
    }  # the dataset is no job
    job = jobs["catalog-cpu-tiny-llama"]
    assert job["depends_on"] == "catalog-prewarm-cpu" and job["agents"] == {"queue": "cpu"}
    assert job["env"] == {
        "CATALOG_MODE": "ci",
        "CATALOG_GPU_CLASS": "cpu",
        "CATALOG_MODEL": "tiny-llama",
        "CATALOG_ENGINE_ARGS": "--dtype float32 --max-model-len 64",
        "CATALOG_READY_BUDGET_S": "300",
    }
    assert job["command"] == "catalog resolve tiny-llama --format vllm-args"


def test_bundled_models_say_what_their_reference_needs(bundled: catalog.Catalog) -> None:
    """The engine tier's reference is float32 with a 64-token context: every bundled model an engine loads carries it
    for the cpu class, so `resolve --format vllm-args` as printed computes what the reference computes."""
    for m in bundled:
        if m.load_format.spec.engine:
            assert m.profiles["cpu"].command_line() == ("--dtype", "float32", "--max-model-len", "64"), m.name
