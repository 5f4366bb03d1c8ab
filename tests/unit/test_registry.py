"""The registry bridge: architecture and repo id -> catalog model, offline, with hints when nothing answers."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import catalog
from catalog.lookup import Catalog
from catalog.registry import NoCatalogModelError, architectures, example_model, model_for_repo


@pytest.mark.parametrize(
    ("architecture", "name"),
    [
        ("LlamaForCausalLM", "tiny-llama"),  # three models declare it: the first by name
        ("Qwen2ForCausalLM", "tiny-qwen2"),
        ("BertModel", "all-minilm-l6-v2"),
    ],
)
def test_example_model_by_architecture(bundled: Catalog, architecture: str, name: str) -> None:
    assert example_model(architecture, bundled).name == name


def test_unknown_architecture_names_the_manifest_to_add(bundled: Catalog) -> None:
    with pytest.raises(NoCatalogModelError) as caught:
        example_model("LlamaForCausalLm", bundled)
    assert str(caught.value) == "no catalog model for architecture LlamaForCausalLm (did you mean LlamaForCausalLM?)"
    assert caught.value.hint == "add a manifest with tags: [arch:LlamaForCausalLm] (catalog add ORG/REPO)"
    assert isinstance(caught.value, LookupError)


def test_every_arch_tag_matches_the_pinned_config(bundled: Catalog, sources: dict[str, Path]) -> None:
    """The tags are the config.json's `architectures`, for every bundled model that has one."""
    for model in bundled:
        if model.file("config.json") is None:
            continue  # a dataset: no architectures to tag
        config = json.loads((sources[model.name] / "config.json").read_text())
        assert sorted(architectures(model)) == sorted(config["architectures"]), model.name


def test_model_for_repo(bundled: Catalog) -> None:
    assert (
        model_for_repo("sentence-transformers/all-minilm-l6-v2", bundled).name == "all-minilm-l6-v2"
    )  # Hub ids fold case
    assert model_for_repo("model-catalog/tiny-llama", bundled, load_format="tensorizer").name == "tiny-llama-tensorizer"


def test_model_for_repo_answers_with_the_primary_as_repo_id_outputs_do(bundled: Catalog) -> None:
    assert model_for_repo("model-catalog/tiny-llama", bundled).name == "tiny-llama"  # primary among three
    assert bundled.repo_owner("model-catalog/tiny-llama").name == "tiny-llama"  # type: ignore[union-attr]


def test_model_for_repo_explains_ambiguity_absence_and_typos(bundled: Catalog) -> None:
    # Without a primary (validate refuses such a catalog; a library caller may build one) several are ambiguous.
    unmarked = dataclasses.replace(
        bundled, models={n: m.model_copy(update={"primary": False}) for n, m in bundled.models.items()}
    )
    with pytest.raises(NoCatalogModelError) as many:
        model_for_repo("model-catalog/tiny-llama", unmarked)
    assert str(many.value) == (
        "model-catalog/tiny-llama is pinned by 3 catalog models: tiny-llama (safetensors), "
        "tiny-llama-sharded (runai_streamer_sharded), tiny-llama-tensorizer (tensorizer)"
    )
    assert "load_format" in (many.value.hint or "")
    with pytest.raises(NoCatalogModelError) as wrong_format:
        model_for_repo("model-catalog/tiny-qwen2", bundled, load_format="gguf")
    assert "pinned as tiny-qwen2 (runai_streamer)" in str(wrong_format.value)
    with pytest.raises(NoCatalogModelError) as typo:
        model_for_repo("model-catalog/tiny-qwen", bundled)
    assert str(typo.value) == "no catalog model pins model-catalog/tiny-qwen (did you mean model-catalog/tiny-qwen2?)"
    assert typo.value.hint == "add a manifest for it (catalog add model-catalog/tiny-qwen)"


def test_exported_from_the_package(monkeypatch: pytest.MonkeyPatch, bundled: Catalog) -> None:
    monkeypatch.setenv("CATALOG_DIR", str(bundled.root))
    assert (
        catalog.example_model("BertModel").name == catalog.model_for_repo("sentence-transformers/all-MiniLM-L6-v2").name
    )
