"""vLLM serves every bundled model from each output of `catalog resolve` that applies to it, with the reference's
tokens (engine_support.py says how loads are grouped and compared)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_support import HARNESS, REFERENCE_OF, EngineSession, Reference, assert_matches, job
from hubdouble import HubDouble

from catalog.lookup import Catalog
from resolver.loaders.vllm_engine import EngineJob, EngineResult

LOCAL = ("all-minilm-l6-v2", "tiny-llama")
STREAMED = ("tiny-qwen2", "tiny-llama-tensorizer", "tiny-llama-sharded")
# The models a repo id answers for (the primary of tiny-llama's three manifests).
BY_REPO_ID = ("all-minilm-l6-v2", "tiny-llama", "tiny-qwen2")


def reference_of(references: dict[str, Reference], name: str) -> Reference:
    return references[REFERENCE_OF.get(name, name)]


@pytest.fixture(scope="session")
def direct(engine_session: EngineSession) -> dict[str, EngineResult]:
    """One worker, offline, for every output that names no repo id: folders (`--format path`), and vllm-args with
    local, streamed and materialized weights."""
    s = engine_session
    jobs: list[EngineJob] = []
    for name in LOCAL:
        jobs.append(job(f"path:{name}", ["--model", s.catalog("resolve", name).strip()], name))
        jobs.append(job(f"args:{name}", s.vllm_args(name), name))
    # A streamed model's folder with its weights brought local is an engine folder too.
    jobs.append(
        job(
            "path:tiny-qwen2",
            ["--model", s.catalog("resolve", "tiny-qwen2", "--materialize-weights").strip()],
            "tiny-qwen2",
        )
    )
    plain = {"CATALOG_ENGINE_LOADER": "plain"}
    for name in STREAMED:
        stream = ("--prefer", "stream")  # the default hands out weights already at hand locally (below)
        jobs.append(job(f"stream:{name}", s.vllm_args(name, *stream), name, s.exported("resolve", name, *stream)))
        jobs.append(
            job(
                f"plain:{name}",
                s.vllm_args(name, *stream, env=plain),
                name,
                s.exported("resolve", name, *stream, env=plain),
            )
        )
        jobs.append(job(f"local:{name}", s.vllm_args(name, "--materialize-weights"), name))
        # Now that its weights are verified in the cache, the default (--prefer local) hands out the local folder.
        jobs.append(job(f"at-hand:{name}", s.vllm_args(name), name))
    # `vllm serve $(catalog resolve NAME --format vllm-args)`: word splitting only, no quote removal (no eval)
    for name, env in (("tiny-qwen2", plain), ("tiny-llama-tensorizer", {})):
        printed = s.catalog("resolve", name, "--format", "vllm-args", "--prefer", "stream", env=env)
        jobs.append(
            job(f"spliced:{name}", printed.split(), name, s.exported("resolve", name, "--prefer", "stream", env=env))
        )
    return s.run(jobs)


@pytest.fixture(scope="session")
def redirected(
    engine_session: EngineSession, bundled: Catalog, redirect_hub: HubDouble, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, EngineResult]:
    """The redirect file, in a worker of its own and online: vLLM 0.32 asks the Hub for a repo id's config (to detect
    speculator models) before it reads VLLM_MODEL_REDIRECT_PATH, so with HF_HUB_OFFLINE=1 or no Hub at all the load
    fails before the redirect applies (docs say so). The Hub here is a double that knows no repo."""
    s = engine_session
    redirect = tmp_path_factory.mktemp("redirect") / "redirect.json"
    # tiny-qwen2's entry is its stream URI (--prefer stream: its weights may be at hand by now)
    redirect.write_text(s.catalog("resolve", *BY_REPO_ID, "--format", "redirect", "--prefer", "stream"))
    streams = s.exported("resolve", "tiny-qwen2", "--prefer", "stream")  # the endpoint a redirect to s3:// needs
    jobs = [
        job(
            f"redirect:{name}",
            ["--model", bundled.get(name).source.hf_repo],
            name,
            {"VLLM_MODEL_REDIRECT_PATH": str(redirect), **streams},
        )
        for name in BY_REPO_ID
    ]
    return s.run(jobs, HF_HUB_OFFLINE="0", HF_ENDPOINT=redirect_hub.url)


@pytest.fixture(scope="session")
def by_repo_id(
    engine_session: EngineSession, bundled: Catalog, hub_cache_env: dict[str, str]
) -> dict[str, EngineResult]:
    """One worker in the environment `resolve --all --layout hf-cache --format env` exports: loads by repo id."""
    s = engine_session
    jobs = []
    for name in BY_REPO_ID:
        jobs.append(job(f"hf-args:{name}", s.vllm_args(name, "--layout", "hf-cache"), name))
        jobs.append(job(f"repo-id:{name}", ["--model", bundled.get(name).source.hf_repo], name))
    return s.run(jobs, **{k: v for k, v in hub_cache_env.items() if k.startswith("HF_")})


@pytest.mark.parametrize("name", LOCAL + ("tiny-qwen2",))
def test_a_resolved_folder_serves_the_reference(
    direct: dict[str, EngineResult], references: dict[str, Reference], engine_session: EngineSession, name: str
) -> None:
    result = direct[f"path:{name}"]
    folder = engine_session.catalog(
        "resolve", name, *(("--materialize-weights",) if name == "tiny-qwen2" else ())
    ).strip()
    assert_matches(result, reference_of(references, name), served=folder)  # a bare --model PATH: vLLM names it so


@pytest.mark.parametrize("name", LOCAL)
def test_vllm_args_of_a_local_model_serve_the_reference_under_its_logical_name(
    direct: dict[str, EngineResult], references: dict[str, Reference], name: str
) -> None:
    assert_matches(direct[f"args:{name}"], reference_of(references, name), served=name)


@pytest.mark.parametrize("name", STREAMED)
def test_vllm_args_stream_from_the_bucket_through_the_verified_loader_and_serve_the_reference(
    direct: dict[str, EngineResult], references: dict[str, Reference], engine_session: EngineSession, name: str
) -> None:
    """runai_streamer, runai_streamer_sharded (two tensor-parallel ranks, one core each) and tensorizer, streamed
    from SeaweedFS through `--load-format catalog` (each tensor hashed against its pin inside the engine), with the
    environment `--format env` exports and the credentials of the standard chain. No workaround is applied: the
    catalog's loader ends in vLLM's common path, which the CPU build's tensorizer loader skips."""
    args = engine_session.vllm_args(name, "--prefer", "stream")
    assert args[args.index("--load-format") + 1] == "catalog"
    result = direct[f"stream:{name}"]
    assert_matches(result, reference_of(references, name), served=name)
    assert result.patched == ()


@pytest.mark.parametrize("name", STREAMED)
def test_the_formats_own_streamer_still_serves_the_reference(
    direct: dict[str, EngineResult], references: dict[str, Reference], name: str
) -> None:
    """CATALOG_ENGINE_LOADER=plain: the format's own loader streams the URI (unverified; resolve's proof vouches for
    the objects). The tensorizer load needs the worker's workaround of vLLM 0.32's CPU-build bug (see
    vllm_worker.py): said here."""
    result = direct[f"plain:{name}"]
    assert_matches(result, reference_of(references, name), served=name)
    if name == "tiny-llama-tensorizer":
        assert result.patched and "process_weights_after_loading" in result.patched[0]


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-llama-tensorizer"])
def test_vllm_args_spliced_into_a_command_without_eval_serve_the_reference(
    direct: dict[str, EngineResult], references: dict[str, Reference], name: str
) -> None:
    """`$(catalog resolve ...)` as CI writes it: tiny-qwen2's plain streamer with its loader config (the JSON form kept
    its shell quotes there and vLLM refused it), tensorizer's verified loader with its own config."""
    assert_matches(direct[f"spliced:{name}"], reference_of(references, name), served=name)


@pytest.mark.parametrize("name", STREAMED)
def test_materialized_weights_serve_the_reference(
    direct: dict[str, EngineResult], references: dict[str, Reference], name: str
) -> None:
    assert_matches(direct[f"local:{name}"], reference_of(references, name), served=name)


@pytest.mark.parametrize("name", STREAMED)
def test_weights_at_hand_are_served_locally_by_default(
    direct: dict[str, EngineResult], references: dict[str, Reference], engine_session: EngineSession, name: str
) -> None:
    """--prefer local: after one materializing resolve, vllm-args name the verified local folder (the same load
    format: the streamers read local files too), and the engine serves the reference from it."""
    args = direct[f"at-hand:{name}"]
    assert_matches(args, reference_of(references, name), served=name)
    answer = json.loads(engine_session.catalog("resolve", name, "--format", "json"))
    assert answer["weights_uri"] is None and answer["streamed"] == [] and answer["source"] == "cache"


@pytest.mark.parametrize("name", BY_REPO_ID)
def test_the_redirect_file_serves_repo_ids(
    redirected: dict[str, EngineResult], references: dict[str, Reference], bundled: Catalog, name: str
) -> None:
    """VLLM_MODEL_REDIRECT_PATH: the engine asked for a repo id loads the verified folder (or streams the verified
    prefix of tiny-qwen2), and keeps the repo id as its name."""
    assert_matches(
        redirected[f"redirect:{name}"], reference_of(references, name), served=bundled.get(name).source.hf_repo
    )


def test_a_redirect_asks_the_hub_for_metadata_only(
    redirected: dict[str, EngineResult], redirect_hub: HubDouble, bundled: Catalog
) -> None:
    """What vLLM 0.32 asks the Hub about a redirected repo id: its config and model info, no file."""
    assert all(r.ok for r in redirected.values())
    repos = "|".join(re.escape(bundled.get(name).source.hf_repo) for name in BY_REPO_ID)
    metadata = re.compile(rf"(GET /api/models/({repos})|HEAD /({repos})/resolve/main/[^/]+\.json)")
    assert [r for r in redirect_hub.requests if not metadata.fullmatch(r)] == []


def test_no_other_load_asks_the_hub(
    direct: dict[str, EngineResult], by_repo_id: dict[str, EngineResult], empty_hub: HubDouble
) -> None:
    """Folders, streams and repo ids in the hf-cache layout (offline): the Hub double saw nothing."""
    assert all(r.ok for r in (*direct.values(), *by_repo_id.values()))
    assert empty_hub.hub_requests() == 0, empty_hub.requests


@pytest.mark.parametrize("name", BY_REPO_ID)
def test_hf_cache_layout_loads_by_repo_id_offline(
    by_repo_id: dict[str, EngineResult], references: dict[str, Reference], bundled: Catalog, name: str
) -> None:
    """`--layout hf-cache`: with only HF_HUB_CACHE and HF_HUB_OFFLINE=1, the engine loads by repo id at the pin
    (`--model REPO --revision REV` from vllm-args, and the plain repo id through refs/main; offline, vLLM 0.32 then
    names the model by its snapshot folder, which only vllm-args' --served-model-name avoids)."""
    assert_matches(by_repo_id[f"hf-args:{name}"], reference_of(references, name), served=name)
    assert_matches(by_repo_id[f"repo-id:{name}"], reference_of(references, name), served=None)


def test_a_repo_id_snapshot_holds_exactly_one_manifests_files(
    engine_session: EngineSession, bundled: Catalog, hub_cache_env: dict[str, str], by_repo_id: dict[str, EngineResult]
) -> None:
    """tiny-llama's repo and revision are pinned three times (safetensors, per-rank shards, tensorizer): the snapshot
    holds the primary's files only, so the engine's default loader (every *.safetensors in the folder) loads one
    model, which `test_hf_cache_layout_loads_by_repo_id_offline` shows by its tokens. The twins are refused in this
    layout and left out of `--all`, with a word on stderr."""
    llama = bundled.get("tiny-llama")
    snapshot = (
        Path(hub_cache_env["HF_HUB_CACHE"]) / "models--model-catalog--tiny-llama" / "snapshots" / llama.source.revision
    )
    held = sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if not p.is_dir())
    assert held == sorted(f.path for f in llama.files)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "catalog",
            "resolve",
            "tiny-llama-sharded",
            "--layout",
            "hf-cache",
            "--store",
            engine_session.store,
            "--cache",
            str(engine_session.cache),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **engine_session.env},
    )
    assert done.returncode == 2
    assert "holds the files of tiny-llama (primary)" in done.stderr and "--layout dir" in done.stderr
    assert by_repo_id["repo-id:tiny-llama"].ok


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return bytes(response.read())


@pytest.fixture(scope="session")
def served(engine_session: EngineSession) -> Iterator[tuple[str, Path]]:
    """`vllm serve` started with tiny-qwen2's vllm-args (weights streamed from the bucket) on loopback."""
    s = engine_session
    port = _free_port()
    args = s.vllm_args("tiny-qwen2", "--prefer", "stream")
    env = {
        **os.environ,
        **s.exported("resolve", "tiny-qwen2", "--prefer", "stream"),
        "HOME": str(s.home),
        "VLLM_CACHE_ROOT": str(s.home / "vllm"),
        "HF_HOME": str(s.home / "hf"),
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    log = s.home / "serve.log"
    with log.open("wb") as sink:
        # `vllm serve` is vLLM's CLI entry point; it reads the version of a distribution named "vllm", which the CPU
        # build's package (vllm-cpu) is not, so the server module it starts is started directly.
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vllm.entrypoints.openai.api_server",
                *args,
                *HARNESS,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=sink,
            stderr=sink,
            env=env,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                _get(base + "/health")
                break
            except OSError:
                assert server.poll() is None, f"vllm serve exited: {log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, "vllm serve did not answer /health in 600 s"
                time.sleep(1)
        yield base, log
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait()


def test_vllm_serve_names_the_model_by_its_logical_name_and_no_storage_path(
    served: tuple[str, Path], engine_session: EngineSession, bundled: Catalog, references: dict[str, Reference]
) -> None:
    """The seed's complaint: a rewrite of `model` to s3:// leaked the storage path into the API and metric labels.
    With the catalog's arguments the engine streams from the bucket yet reports only the logical name."""
    base, _ = served
    models = json.loads(_get(base + "/v1/models"))
    assert [m["id"] for m in models["data"]] == ["tiny-qwen2"]
    reference = references["tiny-qwen2"]
    request = urllib.request.Request(
        base + "/v1/completions",
        method="POST",
        headers={"Content-Type": "application/json"},
        data=json.dumps(
            {
                "model": "tiny-qwen2",
                "prompt": reference.prompt,
                "max_tokens": len(reference.token_ids),
                "temperature": 0,
                "return_token_ids": True,
            }
        ).encode(),
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        completion = json.loads(response.read())
    assert tuple(completion["choices"][0]["token_ids"]) == reference.token_ids
    metrics = _get(base + "/metrics").decode()
    labels = set(re.findall(r'="([^"]*)"', metrics))
    assert "tiny-qwen2" in labels
    bucket = engine_session.store.removeprefix("s3://").strip("/")
    prefix = bundled.get("tiny-qwen2").s3_prefix.removeprefix(bundled.settings.store)
    leaks = [
        v for v in labels if "s3://" in v or bucket in v or prefix.rstrip("/") in v or str(engine_session.cache) in v
    ]
    assert leaks == []


def test_check_load_and_the_engine_agree_on_every_bundled_model(
    engine_session: EngineSession, bundled: Catalog
) -> None:
    """`check-load --engine vllm` loads each model from its vllm-args with the engine; the format's own loaders
    (`check-load` without it) reach the same verdict on every bundled model, and the dataset is skipped by both."""
    own = json.loads(engine_session.catalog("check-load", "--all", "--format", "json"))
    engine = json.loads(
        engine_session.catalog(
            "check-load",
            "--all",
            "--engine",
            "vllm",
            "--format",
            "json",
            env={
                "HOME": str(engine_session.home),
                "HF_HUB_OFFLINE": "1",
                "VLLM_CACHE_ROOT": str(engine_session.home / "vllm"),
                "CATALOG_PREFER": "stream",
            },
        )
    )  # weights at hand still stream
    assert [r["name"] for r in engine] == sorted(m.name for m in bundled)
    assert {r["name"]: (r["ok"], bool(r["skipped"])) for r in engine} == {
        r["name"]: (r["ok"], bool(r["skipped"])) for r in own
    }
    assert all(r["ok"] for r in engine)
    assert [r["name"] for r in engine if r["skipped"]] == ["tiny-sts"]
    assert all(r["engine"].startswith("vllm (--load-format ") for r in engine if not r["skipped"])
    # the streamed models are loaded by the verified loader, every tensor hashed inside the engine
    assert {
        r["name"] for r in engine if not r["skipped"] and r["engine"].startswith("vllm (--load-format catalog)")
    } == set(STREAMED)
