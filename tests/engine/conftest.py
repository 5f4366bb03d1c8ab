"""Fixtures of the engine tier (what they do and why: engine_support.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # engine_support.py

from engine_support import MAX_TOKENS, PROMPTS, EngineSession, Reference
from hubdouble import HubDouble
from servers import SeaweedServer, new_bucket

from catalog.lookup import Catalog


@pytest.fixture(scope="session")
def empty_hub() -> Iterator[HubDouble]:
    """A Hub that knows no repo and counts every request: the engine must never need it."""
    double = HubDouble()
    yield double
    double.close()


@pytest.fixture(scope="session")
def redirect_hub() -> Iterator[HubDouble]:
    """Another Hub that knows no repo: what a redirected load asks it is counted apart."""
    double = HubDouble()
    yield double
    double.close()


@pytest.fixture(scope="session")
def engine_session(
    s3_server: SeaweedServer,
    bundled: Catalog,
    sources: dict[str, Path],
    empty_hub: HubDouble,
    tmp_path_factory: pytest.TempPathFactory,
) -> EngineSession:
    """Every bundled model synced into a fresh bucket by `catalog sync --from-dir`, as a maintainer would."""
    work = tmp_path_factory.mktemp("engine")
    artifacts = work / "artifacts"
    artifacts.mkdir()
    for name, folder in sources.items():
        (artifacts / name).symlink_to(folder)
    session = EngineSession(f"s3://{new_bucket(s3_server.url)}/", work / "cache", work / "home", empty_hub.url)
    session.home.mkdir()
    session.catalog("sync", "--from-dir", str(artifacts))
    return session


@pytest.fixture(scope="session")
def references(engine_session: EngineSession, bundled: Catalog) -> dict[str, Reference]:
    """Greedy tokens (embeddings for the pooling model) from transformers over each model's verified folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    found: dict[str, Reference] = {}
    for name in ("tiny-llama", "tiny-qwen2"):
        folder = engine_session.catalog("resolve", name, "--materialize-weights").strip()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        ids = tokenizer(PROMPTS[name], return_tensors="pt").input_ids
        out = model.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False, min_new_tokens=MAX_TOKENS)
        found[name] = Reference(PROMPTS[name], tuple(ids[0].tolist()), tuple(out[0, ids.shape[1] :].tolist()))
    from sentence_transformers import SentenceTransformer

    folder = engine_session.catalog("resolve", "all-minilm-l6-v2").strip()
    encoder = SentenceTransformer(folder, device="cpu")
    vector = encoder.encode([PROMPTS["all-minilm-l6-v2"]], normalize_embeddings=True)[0]
    found["all-minilm-l6-v2"] = Reference(PROMPTS["all-minilm-l6-v2"], (), embedding=tuple(float(v) for v in vector))
    return found


@pytest.fixture(scope="session")
def hub_cache_env(engine_session: EngineSession) -> Iterator[dict[str, str]]:
    """`resolve --all --layout hf-cache --format env`: the README's CI switch, once per session."""
    yield engine_session.exported("resolve", "--all", "--layout", "hf-cache")
