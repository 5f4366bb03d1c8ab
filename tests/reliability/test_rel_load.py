"""Load: 50 generated small models resolved from SeaweedFS in one `catalog resolve --all` and in 50 parallel
`catalog resolve NAME` processes (8 at a time): zero failures, every file verified on disk.
bench/load_resolve.py runs the same with 200 models and reports throughput and memory.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import catalog

from .support import (
    blob_mismatches,
    check_view_files,
    cli_env,
    explain,
    leftover_temps,
    parse_json_results,
    run_catalog,
    upload_generated,
    write_generated_catalog,
)

MODELS = 50
POOL = 8


def test_fifty_models_resolve_in_one_call_and_in_fifty_processes(
    s3_server, bucket: str, tmp_path: Path, long_run: bool
) -> None:  # type: ignore[no-untyped-def]
    models = 200 if long_run else MODELS
    manifests, data, names = write_generated_catalog(tmp_path / "work", bucket, models)
    upload_generated(manifests, data, names, f"s3://{bucket}/")
    cat = catalog.load(manifests)
    env = cli_env({"CATALOG_DIR": str(manifests), "HOME": str(tmp_path / "home")})

    together = run_catalog(
        ["resolve", "--all", "--format", "json", "--cache", str(tmp_path / "cache-all")], env, timeout=600
    )
    assert together.returncode == 0, explain(together)
    results = parse_json_results(together.stdout)
    assert sorted(r["name"] for r in results) == sorted(names)
    bad = [problem for r in results for problem in check_view_files(r, cat.get(r["name"]))]
    assert bad == []

    cache = tmp_path / "cache-each"

    def one(name: str) -> subprocess.CompletedProcess[str]:
        return run_catalog(["resolve", name, "--format", "json", "--cache", str(cache)], env, timeout=600)

    with ThreadPoolExecutor(POOL) as pool:
        done = list(pool.map(one, names))
    failures = [f"{name}: {explain(d)}" for name, d in zip(names, done, strict=True) if d.returncode != 0]
    assert failures == [], f"{len(failures)} of {models} resolves failed:\n" + "\n".join(failures[:5])
    for name, d in zip(names, done, strict=True):
        (result,) = parse_json_results(d.stdout)
        assert result["name"] == name
        assert check_view_files(result, cat.get(name)) == []
    for root in (tmp_path / "cache-all", cache):
        assert blob_mismatches(root) == []
        assert leftover_temps(root) == []
    verified = run_catalog(["verify", "--deep", "--cache", str(cache)], env)
    assert verified.returncode == 0, explain(verified)
    assert f"{models} view(s)" in verified.stderr
