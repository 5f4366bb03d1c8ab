"""Every lint rule, each with a failing and a passing manifest, asserting the exact file:line reported."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import REV, SHA, files_yaml, manifest_text, write_catalog

from catalog.errors import Problem
from catalog.loading import load_dir


def problems_of(tmp_path: Path, manifests: dict[str, str], *changed: str, **kw: str) -> list[Problem]:
    """The problems `catalog validate` reports from `tmp_path` (only those of `changed` files, when named).

    The working directory is changed only for the call (display paths are relative to it) and restored.
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        folder = write_catalog(tmp_path, manifests, **kw)
        return load_dir(folder, [folder / c for c in changed] or None).problems


def lines(problems: list[Problem]) -> list[str]:
    return [f"{p.path}:{p.line}: {p.rule}" for p in problems]


def test_a_valid_manifest_has_no_problems(tmp_path: Path) -> None:
    assert problems_of(tmp_path, {"tiny.yaml": manifest_text()}) == []


def test_broken_yaml_reports_the_line_of_the_syntax_error(tmp_path: Path) -> None:
    broken = manifest_text().replace("load_format: safetensors", "load_format: [safetensors")
    found = problems_of(tmp_path, {"tiny.yaml": broken})
    assert len(found) == 1
    assert found[0].rule == "yaml" and found[0].path == "manifests/tiny.yaml"
    assert found[0].line in (6, 7)  # the unclosed flow sequence is detected at the next line
    assert "invalid YAML" in found[0].message


def test_duplicate_keys_are_refused_with_both_lines(tmp_path: Path) -> None:
    found = problems_of(tmp_path, {"tiny.yaml": manifest_text() + "load_format: pt\n"})
    assert lines(found) == ["manifests/tiny.yaml:15: yaml"]
    assert "first at line 6" in found[0].message


def test_python_tags_are_refused_and_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    text = manifest_text(extra=f"description: !!python/object/apply:os.system ['touch {marker}']\n")
    found = problems_of(tmp_path, {"tiny.yaml": text})
    assert lines(found) == ["manifests/tiny.yaml:8: yaml"]
    assert "unsupported YAML tag" in found[0].message
    assert not marker.exists()


def test_alias_bomb_is_bounded(tmp_path: Path) -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    found = problems_of(tmp_path, {"tiny.yaml": bomb})
    assert [p.rule for p in found] == ["yaml"]
    assert "alias bomb" in found[0].message


def test_schema_errors_name_the_key_and_its_line(tmp_path: Path) -> None:
    text = manifest_text(extra="gpus: 2\n").replace("size: 1000", 'size: "1000"')
    found = problems_of(tmp_path, {"tiny.yaml": text})
    assert lines(found) == ["manifests/tiny.yaml:8: schema", "manifests/tiny.yaml:14: schema"]
    assert found[0].field == "gpus" and "did you mean 'gpu'" in found[0].message
    assert found[1].field == "files[1].size" and "integer" in found[1].message


def test_missing_required_key_points_at_its_parent(tmp_path: Path) -> None:
    text = manifest_text().replace(f"  revision: {REV}\n", "")
    found = problems_of(tmp_path, {"tiny.yaml": text})
    assert lines(found) == ["manifests/tiny.yaml:2: schema"]
    assert found[0].field == "source.revision" and found[0].message == "required key is missing"


def test_a_number_where_text_belongs_says_to_quote_it(tmp_path: Path) -> None:
    found = problems_of(tmp_path, {"tiny.yaml": manifest_text(revision="1234567")})
    assert lines(found) == ["manifests/tiny.yaml:4: schema"]
    assert "quote" in found[0].message


def test_a_document_that_is_not_a_mapping_is_one_problem(tmp_path: Path) -> None:
    found = problems_of(tmp_path, {"tiny.yaml": "- just\n- a list\n", "empty.yaml": ""})
    assert lines(found) == ["manifests/empty.yaml:1: yaml", "manifests/tiny.yaml:1: yaml"]


def test_duplicate_names_point_at_the_first_definition(tmp_path: Path) -> None:
    found = problems_of(
        tmp_path,
        {
            "tiny.yaml": manifest_text(extra="primary: true\n"),
            "more/tiny.yaml": manifest_text(prefix="s3://ci-bucket/other/tiny/"),
        },
    )
    assert lines(found) == ["manifests/more/tiny.yaml:1: duplicate-name", "manifests/tiny.yaml:1: duplicate-name"]
    assert "also defined at manifests/tiny.yaml:1" in found[0].message
    assert "also defined at manifests/more/tiny.yaml:1" in found[1].message


def test_file_name_must_match_the_name(tmp_path: Path) -> None:
    found = problems_of(tmp_path, {"other.yaml": manifest_text()})
    assert lines(found) == ["manifests/other.yaml:1: file-name"]


def test_bad_logical_name(tmp_path: Path) -> None:
    found = problems_of(tmp_path, {"Tiny.yaml": manifest_text("Tiny")})
    assert "manifests/Tiny.yaml:1: name" in lines(found)


@pytest.mark.parametrize("revision", ["main", "refs/pr/12", "v1.0", "'0123456'", REV.upper()])
def test_unpinned_revisions_are_refused(tmp_path: Path, revision: str) -> None:
    found = problems_of(tmp_path, {"tiny.yaml": manifest_text(revision=revision)})
    assert lines(found) == ["manifests/tiny.yaml:4: revision-unpinned"]


@pytest.mark.parametrize(
    "prefix",
    [
        "https://ci-bucket/org/tiny/",  # scheme
        "s3://ci-bucket/org/tiny",  # no trailing slash
        "s3://ci-bucket/org//tiny/",  # empty segment
        "s3://ci-bucket/org/tiny//",  # two trailing slashes
        "s3://ci-bucket//org/tiny/",  # leading slash in the key
        "s3://ci-bucket/org/../tiny/",  # traversal
        "s3://CI_Bucket/org/tiny/",  # bucket naming rules
        "s3://ci-bucket/",  # the whole bucket
        "s3://other-bucket/org/tiny/",  # outside the catalog's store
    ],
)
def test_bad_prefixes_are_refused(tmp_path: Path, prefix: str) -> None:
    found = problems_of(tmp_path, {"tiny.yaml": manifest_text(prefix=prefix)})
    assert lines(found) == ["manifests/tiny.yaml:5: s3-prefix"]


def test_a_prefix_that_is_a_string_prefix_of_another_is_refused(tmp_path: Path) -> None:
    found = problems_of(
        tmp_path,
        {
            "opt.yaml": manifest_text("opt", prefix="s3://ci-bucket/facebook/opt-125m/"),
            "opt-inner.yaml": manifest_text("opt-inner", prefix="s3://ci-bucket/facebook/opt-125m/inner/"),
            "opt-hf.yaml": manifest_text("opt-hf", prefix="s3://ci-bucket/facebook/opt-125m-hf/"),  # fine: '/' boundary
            "same.yaml": manifest_text("same", prefix="s3://ci-bucket/facebook/opt-125m/"),
        },
    )
    assert lines(found) == [  # every overlap on both of its files
        "manifests/opt-inner.yaml:5: prefix-overlap",  # inside opt's prefix
        "manifests/opt-inner.yaml:5: prefix-overlap",  # and inside same's
        "manifests/opt.yaml:5: prefix-overlap",  # a string prefix of opt-inner's
        "manifests/opt.yaml:5: prefix-overlap",  # identical to same's
        "manifests/same.yaml:5: prefix-overlap",  # a string prefix of opt-inner's
        "manifests/same.yaml:5: prefix-overlap",  # identical to opt's
    ]
    assert "'opt' (manifests/opt.yaml:5)" in found[0].message
    on_opt = " ".join(p.message for p in found if p.path == "manifests/opt.yaml")
    assert "'opt-inner' (manifests/opt-inner.yaml:5)" in on_opt and "'same' (manifests/same.yaml:5)" in on_opt


@pytest.mark.parametrize(
    "path",
    [
        "../escape.json",
        "/etc/passwd",
        "dir\\file.json",
        ".git/config",
        "a/./b.json",
        "a//b.json",
        "C:/x.json",
        "sub/../../x",
    ],
)
def test_file_paths_must_stay_inside_the_model(tmp_path: Path, path: str) -> None:
    files = files_yaml(("config.json", 10, SHA), ("model.safetensors", 1000, SHA), (f"'{path}'", 1, SHA))
    found = problems_of(tmp_path, {"tiny.yaml": manifest_text(files=files)})
    assert lines(found) == ["manifests/tiny.yaml:15: file-path"]


def test_duplicate_paths_also_case_insensitively(tmp_path: Path) -> None:
    files = files_yaml(
        ("config.json", 10, SHA), ("model.safetensors", 1000, SHA), ("config.json", 10, SHA), ("Config.JSON", 10, SHA)
    )
    found = problems_of(tmp_path, {"tiny.yaml": manifest_text(files=files)})
    assert lines(found) == ["manifests/tiny.yaml:15: duplicate-path", "manifests/tiny.yaml:18: duplicate-path"]
    assert "only in case" in found[1].message


def test_bad_sha256_and_negative_size(tmp_path: Path) -> None:
    files = files_yaml(("config.json", -1, SHA), ("model.safetensors", 1000, "A" * 64))
    found = problems_of(tmp_path, {"tiny.yaml": manifest_text(files=files)})
    assert lines(found) == ["manifests/tiny.yaml:10: size", "manifests/tiny.yaml:14: sha256"]


def test_an_unlocked_manifest_names_the_lock_command(tmp_path: Path) -> None:
    found = problems_of(tmp_path, {"tiny.yaml": manifest_text(files="  []\n").replace("files:\n  []", "files: []")})
    assert lines(found) == ["manifests/tiny.yaml:8: unlocked"]
    assert "catalog lock tiny" in found[0].message


@pytest.mark.parametrize(
    ("fmt", "paths", "ok"),
    [
        ("safetensors", ["config.json", "model.safetensors"], True),
        ("safetensors", ["model.safetensors"], False),
        ("runai_streamer", ["config.json", "tokenizer.json"], False),
        ("runai_streamer", ["config.json", "tokenizer.json", "model.safetensors"], True),
        # A streamed model's engine reads the tokenizer locally: it must be pinned.
        ("runai_streamer", ["config.json", "model.safetensors"], False),
        ("runai_streamer_sharded", ["config.json", "tokenizer.json", "model-rank-0-part-0.safetensors"], True),
        ("runai_streamer_sharded", ["config.json", "model-rank-0-part-0.safetensors"], False),
        ("runai_streamer_sharded", ["config.json", "tokenizer.json", "model.safetensors"], False),
        ("tensorizer", ["config.json", "tokenizer_config.json", "model.tensors"], True),
        ("tensorizer", ["config.json", "model.tensors"], False),
        ("tensorizer", ["config.json", "tokenizer.json", "model.safetensors"], False),
        ("gguf", ["model-q4.gguf"], True),
        ("gguf", ["config.json"], False),
    ],
)
def test_load_format_requirements(tmp_path: Path, fmt: str, paths: list[str], ok: bool) -> None:
    files = "".join(f"  - path: {p}\n    size: 10\n    sha256: {SHA}\n" for p in paths)
    found = problems_of(tmp_path, {"tiny.yaml": manifest_text(fmt=fmt, files=files)})
    assert lines(found) == ([] if ok else ["manifests/tiny.yaml:6: load-format"])


@pytest.mark.parametrize(
    "path",
    [
        "pytorch_model.bin",
        "optimizer.pt",
        "weights.pth",
        "x.ckpt",
        "data.pkl",
        "sub/state.pickle",
        "model.joblib",
        "modeling_tiny.py",
        "sub/configuration_x.py",
    ],
)
def test_files_that_run_code_on_load_need_a_reason(tmp_path: Path, path: str) -> None:
    files = (
        f"  - path: config.json\n    size: 10\n    sha256: {SHA}\n  - path: {path}\n    size: 10\n    sha256: {SHA}\n"
    )
    refused = problems_of(tmp_path, {"tiny.yaml": manifest_text(fmt="pt", files=files)})
    assert lines(refused) == ["manifests/tiny.yaml:12: load-safety"]
    assert "allow_code" in refused[0].message and repr(path) in refused[0].message
    assert "torch>=2.10" in refused[0].message  # the pt format's loader requirement is said
    reason = "allow_code: legacy checkpoint, reviewed in PR 123; scanned on every runner\n"
    allowed = problems_of(tmp_path, {"tiny.yaml": manifest_text(fmt="pt", files=files, extra=reason)})
    assert allowed == []


def test_allow_pickle_alone_does_not_say_why(tmp_path: Path) -> None:
    files = f"  - path: config.json\n    size: 10\n    sha256: {SHA}\n  - path: pytorch_model.bin\n    size: 10\n    sha256: {SHA}\n"
    found = problems_of(tmp_path, {"tiny.yaml": manifest_text(fmt="pt", files=files, extra="allow_pickle: true\n")})
    assert sorted(lines(found)) == ["manifests/tiny.yaml:13: load-safety", "manifests/tiny.yaml:8: load-safety"]
    assert any("replace it with `allow_code:" in p.message for p in found)
    both = problems_of(
        tmp_path,
        {"tiny.yaml": manifest_text(fmt="pt", files=files, extra="allow_pickle: true\nallow_code: reviewed\n")},
    )
    assert both == []
    empty = problems_of(tmp_path, {"tiny.yaml": manifest_text(fmt="pt", files=files, extra="allow_code: ''\n")})
    assert [p.rule for p in empty] == ["schema"]  # a reason, not an empty string


def test_gpu_class_must_be_known(tmp_path: Path) -> None:
    found = problems_of(tmp_path, {"tiny.yaml": manifest_text().replace("{class: cpu}", "{class: tpu}")})
    assert lines(found) == ["manifests/tiny.yaml:7: gpu-class"]
    assert "cpu, h200, l4" in found[0].message


def test_oversize_weights_for_the_gpu_class(tmp_path: Path) -> None:
    big = 30 * 1024**3
    files = f"  - path: config.json\n    size: 10\n    sha256: {SHA}\n  - path: model.safetensors\n    size: {big}\n    sha256: {SHA}\n"
    text = manifest_text(files=files).replace("{class: cpu}", "{class: l4}")
    assert lines(problems_of(tmp_path, {"tiny.yaml": text})) == ["manifests/tiny.yaml:7: gpu-memory"]
    two = text.replace("{class: l4}", "{class: l4, count: 2}")
    assert problems_of(tmp_path, {"tiny.yaml": two}) == []


def test_weights_that_fit_without_headroom_are_still_refused(tmp_path: Path) -> None:
    """23.8 GiB of weights fit a 24 GiB L4 byte for byte, but not with the KV cache and activations beside them."""
    size = int(23.8 * 1024**3)
    files = f"  - path: config.json\n    size: 10\n    sha256: {SHA}\n  - path: model.safetensors\n    size: {size}\n    sha256: {SHA}\n"
    text = manifest_text(files=files).replace("{class: cpu}", "{class: l4}")
    (tmp_path / "default").mkdir()
    (tmp_path / "factor-1").mkdir()
    found = problems_of(tmp_path / "default", {"tiny.yaml": text})
    assert (
        lines(found) == ["manifests/tiny.yaml:7: gpu-memory"]
        and "x 1.2 (catalog.yaml gpu_memory_factor)" in found[0].message
    )
    from helpers import SETTINGS

    no_headroom = SETTINGS + "gpu_memory_factor: 1.0\n"
    assert problems_of(tmp_path / "factor-1", {"tiny.yaml": text}, settings=no_headroom) == []


def test_default_gpu_class_applies_when_none_is_named(tmp_path: Path) -> None:
    files = (
        f"  - path: config.json\n    size: 10\n    sha256: {SHA}\n"
        f"  - path: model.safetensors\n    size: {30 * 1024**3}\n    sha256: {SHA}\n"
    )
    text = manifest_text(files=files).replace("gpu: {class: cpu}\n", "")
    assert [p.rule for p in problems_of(tmp_path, {"tiny.yaml": text})] == ["gpu-memory"]  # default l4: 24 GiB


def test_files_outside_include_patterns(tmp_path: Path) -> None:
    text = manifest_text().replace("  revision:", "  include: ['*.json']\n  revision:")
    found = problems_of(tmp_path, {"tiny.yaml": text})
    assert lines(found) == ["manifests/tiny.yaml:13: file-selection"]


def test_tokenizer_must_be_a_model_or_a_pinned_subfolder(tmp_path: Path) -> None:
    bad = manifest_text(extra="tokenizer: nope\n")
    assert lines(problems_of(tmp_path, {"tiny.yaml": bad})) == ["manifests/tiny.yaml:8: tokenizer"]
    other = manifest_text("tok", prefix="s3://ci-bucket/org/tok/")
    good = manifest_text(extra="tokenizer: tok\n")
    assert problems_of(tmp_path, {"tiny.yaml": good, "tok.yaml": other}) == []


def test_settings_problems(tmp_path: Path) -> None:
    found = problems_of(
        tmp_path,
        {"tiny.yaml": manifest_text()},
        settings="store: s3://ci-bucket\ndefault_gpu: x100\ngpu_classes:\n  cpu: {memory_gib: 16}\n",
    )
    rules = {(p.path, p.line, p.rule) for p in found}
    assert ("manifests/catalog.yaml", 1, "s3-prefix") in rules
    assert ("manifests/catalog.yaml", 2, "gpu-class") in rules


def test_every_problem_of_every_file_is_reported_at_once(tmp_path: Path) -> None:
    found = problems_of(
        tmp_path,
        {
            "a.yaml": manifest_text("a", revision="main"),
            "b.yaml": manifest_text("b", prefix="s3://ci-bucket/org/b"),
            "c.yaml": "name: [c\n",
        },
    )
    assert [p.rule for p in found] == ["revision-unpinned", "s3-prefix", "yaml"]


def test_loading_only_named_models_reads_just_them_and_their_tokenizer(tmp_path: Path) -> None:
    import catalog

    folder = write_catalog(
        tmp_path,
        {
            "a.yaml": manifest_text("a", extra="tokenizer: tok\n"),
            "tok.yaml": manifest_text("tok"),
            "broken.yaml": "name: [",  # never read by a lookup of `a`
        },
    )
    partial = catalog.load(folder, only=["a"])
    assert sorted(partial.models) == ["a", "tok"]
    with pytest.raises(catalog.InvalidCatalogError):
        catalog.load(folder)  # the whole catalog has a problem
    with pytest.raises(catalog.InvalidCatalogError):
        catalog.load(folder, only=["nope"])  # falls back to the full load, which reports the broken file
    (folder / "broken.yaml").unlink()
    with pytest.raises(catalog.UnknownModelError) as unknown:
        catalog.load(folder, only=["tokk"]).get("tokk")
    assert unknown.value.suggestions == ["tok"]


def test_rank_files_must_match_the_gpu_count(tmp_path: Path) -> None:
    ranks = ["config.json", "tokenizer.json", "model-rank-0-part-0.safetensors", "model-rank-1-part-0.safetensors"]
    files = "".join(f"  - path: {p}\n    size: 10\n    sha256: {SHA}\n" for p in ranks)
    text = manifest_text(fmt="runai_streamer_sharded", files=files)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    assert lines(problems_of(tmp_path / "one", {"tiny.yaml": text})) == ["manifests/tiny.yaml:7: tensor-parallel"]
    two = text.replace("gpu: {class: cpu}", "gpu: {class: cpu, count: 2}")
    assert lines(problems_of(tmp_path / "two", {"tiny.yaml": two})) == []


def test_one_primary_manifest_per_repo(tmp_path: Path) -> None:
    a = manifest_text("a", extra="primary: true\n").replace("hf_repo: org/a", "hf_repo: org/shared")
    b = manifest_text("b", extra="primary: true\n").replace("hf_repo: org/b", "hf_repo: org/shared")
    assert lines(problems_of(tmp_path, {"a.yaml": a, "b.yaml": b})) == [
        "manifests/a.yaml:8: primary",
        "manifests/b.yaml:8: primary",
    ]


def test_several_manifests_of_one_repo_need_a_primary_reported_on_each(tmp_path: Path) -> None:
    a = manifest_text("a").replace("hf_repo: org/a", "hf_repo: org/shared")
    b = manifest_text("b").replace("hf_repo: org/b", "hf_repo: org/shared")
    found = problems_of(tmp_path, {"a.yaml": a, "b.yaml": b})
    assert lines(found) == ["manifests/a.yaml:3: primary", "manifests/b.yaml:3: primary"]
    assert "also pinned by manifests/b.yaml and none is `primary: true`" in found[0].message
    (tmp_path / "alone").mkdir()
    assert lines(problems_of(tmp_path / "alone", {"a.yaml": a, "b.yaml": b}, "b.yaml")) == [
        "manifests/b.yaml:3: primary"
    ]
    (tmp_path / "marked").mkdir()
    marked = a.replace("gpu: {class: cpu}\n", "gpu: {class: cpu}\nprimary: true\n")
    assert problems_of(tmp_path / "marked", {"a.yaml": marked, "b.yaml": b}) == []
    # A dataset repo is no model id: a dataset and a model of one repo id need no primary.
    (tmp_path / "dataset").mkdir()
    dataset = b.replace("  revision:", "  repo_type: dataset\n  revision:").replace(
        "load_format: safetensors", "load_format: dataset"
    )
    assert [p for p in problems_of(tmp_path / "dataset", {"a.yaml": a, "b.yaml": dataset}) if p.rule == "primary"] == []


def test_engine_set_loader_keys_are_refused(tmp_path: Path) -> None:
    files = files_yaml(("config.json", 10, SHA), ("model.tensors", 1000, "b" * 64), ("tokenizer.json", 10, SHA))
    text = manifest_text(fmt="tensorizer", files=files, extra="loader:\n  deserialization_kwargs: {lazy_load: false}\n")
    found = problems_of(tmp_path, {"tiny.yaml": text})
    assert lines(found) == ["manifests/tiny.yaml:9: loader"]
    assert "deserialization_kwargs.lazy_load is set by the engine" in found[0].message
    (tmp_path / "uri").mkdir()
    uri = text.replace("{lazy_load: false}", "{num_readers: 2}\n  tensorizer_uri: s3://elsewhere/x.tensors")
    assert lines(problems_of(tmp_path / "uri", {"tiny.yaml": uri})) == ["manifests/tiny.yaml:10: loader"]
    (tmp_path / "fine").mkdir()
    assert problems_of(tmp_path / "fine", {"tiny.yaml": text.replace("lazy_load: false", "num_readers: 2")}) == []


# Cross-manifest rules with only the changed file named (what pre-commit runs): the changed file always
# gets its problem, whichever way the two files sort.

QWEN = "s3://ci-bucket/org/tiny-qwen2/"


@pytest.mark.parametrize("copy", ["aa-copy", "zz-copy"])
def test_a_changed_file_reusing_a_prefix_fails_alone_whichever_way_it_sorts(tmp_path: Path, copy: str) -> None:
    catalog = {"tiny-qwen2.yaml": manifest_text("tiny-qwen2"), f"{copy}.yaml": manifest_text(copy, prefix=QWEN)}
    found = problems_of(tmp_path, catalog, f"{copy}.yaml")
    assert lines(found) == [f"manifests/{copy}.yaml:5: prefix-overlap"]
    assert "the same prefix as 'tiny-qwen2' (manifests/tiny-qwen2.yaml:5)" in found[0].message
    untouched = problems_of(tmp_path, catalog, "tiny-qwen2.yaml")  # the other side is told too
    assert lines(untouched) == ["manifests/tiny-qwen2.yaml:5: prefix-overlap"]


def test_an_umbrella_prefix_fails_alone(tmp_path: Path) -> None:
    catalog = {
        "tiny-qwen2.yaml": manifest_text("tiny-qwen2"),
        "tiny-llama.yaml": manifest_text("tiny-llama"),
        "umbrella.yaml": manifest_text("umbrella", prefix="s3://ci-bucket/org/"),  # holds every other model
    }
    found = problems_of(tmp_path, catalog, "umbrella.yaml")
    assert lines(found) == ["manifests/umbrella.yaml:5: prefix-overlap"] * 2
    assert "a string prefix of the prefix of 'tiny-llama' (manifests/tiny-llama.yaml:5)" in found[0].message
    assert "'tiny-qwen2' (manifests/tiny-qwen2.yaml:5)" in found[1].message


def test_a_duplicate_name_fails_alone_on_either_file(tmp_path: Path) -> None:
    catalog = {
        "tiny.yaml": manifest_text(extra="primary: true\n"),
        "more/tiny.yaml": manifest_text(prefix="s3://ci-bucket/other/tiny/"),
    }
    assert lines(problems_of(tmp_path, catalog, "tiny.yaml")) == ["manifests/tiny.yaml:1: duplicate-name"]
    assert lines(problems_of(tmp_path, catalog, "more/tiny.yaml")) == ["manifests/more/tiny.yaml:1: duplicate-name"]


def test_a_second_primary_fails_alone_on_either_file(tmp_path: Path) -> None:
    a = manifest_text("a", extra="primary: true\n").replace("hf_repo: org/a", "hf_repo: org/shared")
    b = manifest_text("b", extra="primary: true\n").replace("hf_repo: org/b", "hf_repo: org/shared")
    found = problems_of(tmp_path, {"a.yaml": a, "b.yaml": b}, "a.yaml")
    assert lines(found) == ["manifests/a.yaml:8: primary"]
    assert "manifests/b.yaml:8" in found[0].message
    assert lines(problems_of(tmp_path, {"a.yaml": a, "b.yaml": b}, "b.yaml")) == ["manifests/b.yaml:8: primary"]


def _same_repo(name: str, files: str) -> str:
    """A manifest pinning org/shared; `a` is its primary (several manifests of one repo need one)."""
    return manifest_text(name, files=files, extra="primary: true\n" if name == "a" else "").replace(
        f"hf_repo: org/{name}", "hf_repo: org/shared"
    )


def test_two_manifests_pinning_different_bytes_for_one_path_at_one_revision(tmp_path: Path) -> None:
    a = _same_repo("a", files_yaml(("config.json", 10, SHA), ("model.safetensors", 1000, "b" * 64)))
    b = _same_repo(
        "b", files_yaml(("config.json", 10, SHA), ("extra.json", 5, SHA), ("model.safetensors", 1000, "c" * 64))
    )
    c = _same_repo("c", files_yaml(("config.json", 11, SHA), ("model.safetensors", 1000, "b" * 64)))  # size differs
    found = problems_of(tmp_path, {"a.yaml": a, "b.yaml": b, "c.yaml": c})
    assert lines(found) == [
        "manifests/a.yaml:10: pin-conflict",  # config.json vs c (a has one more line: primary)
        "manifests/a.yaml:13: pin-conflict",  # model.safetensors vs b
        "manifests/b.yaml:9: pin-conflict",  # config.json vs c
        "manifests/b.yaml:15: pin-conflict",  # model.safetensors vs a and c
        "manifests/c.yaml:9: pin-conflict",  # config.json vs a and b
        "manifests/c.yaml:12: pin-conflict",  # model.safetensors vs b
    ]
    on_b = next(p for p in found if p.path == "manifests/b.yaml" and p.line == 15)
    assert on_b.field == "files[2].path"
    assert (
        f"'model.safetensors' at org/shared@0123456789ab is pinned here as sha256 {'c' * 64}, 1000 bytes"
        in on_b.message
    )
    assert "manifests/a.yaml:13" in on_b.message and "manifests/c.yaml:12" in on_b.message
    (tmp_path / "two").mkdir()
    alone = problems_of(tmp_path / "two", {"a.yaml": a, "b.yaml": b}, "b.yaml")  # the changed file alone
    assert lines(alone) == ["manifests/b.yaml:15: pin-conflict"]


def test_the_same_path_may_differ_at_another_revision_or_repo(tmp_path: Path) -> None:
    a = _same_repo("a", files_yaml(("config.json", 10, SHA), ("model.safetensors", 1000, "b" * 64)))
    newer = _same_repo("b", files_yaml(("config.json", 10, SHA), ("model.safetensors", 1000, "c" * 64)))
    newer = newer.replace("0123456789abcdef0123", "fedcba98765432100123")
    other_repo = manifest_text("c", files=files_yaml(("config.json", 10, SHA), ("model.safetensors", 7, "d" * 64)))
    same = _same_repo("d", files_yaml(("config.json", 10, SHA), ("model.safetensors", 1000, "b" * 64)))  # agrees
    assert problems_of(tmp_path, {"a.yaml": a, "b.yaml": newer, "c.yaml": other_repo, "d.yaml": same}) == []
