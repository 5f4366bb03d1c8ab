"""Concurrency: eight `catalog resolve` processes and `catalog gc` at the same time over one cache, round
after round; rounds of resolves of one view that build (or repair) it at the same moment, beside gc; two
`catalog sync` processes against one bucket. Afterwards every path a resolve printed still holds the pinned
bytes, `verify --deep` is clean, and the bucket holds exactly the pins.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from catalog.lookup import Catalog
from resolver.cache import Cache
from resolver.resolve import resolve
from resolver.stores import LocalStore, open_store
from resolver.upload import upload_from_dir

from .support import (
    BUNDLED,
    blob_mismatches,
    bucket_objects,
    catalog_cmd,
    check_view_files,
    cli_env,
    explain,
    leftover_temps,
    parse_json_results,
    run_catalog,
    s3_client,
    upload_generated,
    write_generated_catalog,
)

# Eight resolves that overlap on purpose: the same blobs through different models' views, both layouts,
# streamed and materialized weights.
RESOLVES = (
    ("all-minilm-l6-v2",),
    ("tiny-llama",),
    ("tiny-qwen2", "--materialize-weights"),
    ("tiny-llama-sharded",),
    ("tiny-llama-tensorizer", "--materialize-weights"),
    ("tiny-llama", "--layout", "hf-cache"),
    ("all-minilm-l6-v2", "--layout", "hf-cache"),
    ("tiny-qwen2",),
)


class GcLoop(threading.Thread):
    """`catalog gc`, one process at a time, again and again until stopped."""

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.env = env
        self.stop = threading.Event()
        self.runs: list[subprocess.CompletedProcess[str]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            self.runs.append(run_catalog(["gc"], self.env, timeout=120))


def test_eight_resolves_and_gc_at_once_over_one_cache(
    bundled: Catalog,
    sources: dict[str, Path],
    s3_server,
    bucket: str,
    tmp_path: Path,
    rng,
    long_run: bool,  # type: ignore[no-untyped-def]
) -> None:
    url = f"s3://{bucket}/"
    store = open_store(url)
    for name in sources:
        upload_from_dir(bundled, name, sources[name], store)
    cache_dir = tmp_path / "cache"
    env = cli_env(
        {
            "CATALOG_DIR": str(BUNDLED),
            "CATALOG_STORE": url,
            "CATALOG_CACHE": str(cache_dir),
            "HOME": str(tmp_path / "home"),
        }
    )
    rounds = 10 if long_run else 3
    for round_ in range(rounds):
        if round_:  # views rebuilt every round; a random half of the blobs fetched again
            for folder in ("models", "markers", "hub"):
                shutil.rmtree(cache_dir / folder, ignore_errors=True)
            for blob in sorted((cache_dir / "blobs").glob("*/*")):
                if rng.random() < 0.5:
                    blob.unlink()
        gc_loop = GcLoop(env)
        gc_loop.start()
        procs = [
            subprocess.Popen(
                catalog_cmd("resolve", *args, "--format", "json", "--part-size", "8MiB", "--concurrency", "2"),
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for args in RESOLVES
        ]
        outputs = [p.communicate(timeout=300) for p in procs]
        gc_loop.stop.set()
        gc_loop.join(timeout=120)
        failed = [
            f"{' '.join(args)}: exit {p.returncode}\n{err[-2000:]}"
            for args, p, (_, err) in zip(RESOLVES, procs, outputs, strict=True)
            if p.returncode != 0
        ]
        assert failed == [], f"round {round_}: " + "\n".join(failed)
        assert [g.returncode for g in gc_loop.runs] == [0] * len(gc_loop.runs), [
            explain(g) for g in gc_loop.runs if g.returncode
        ]
        assert gc_loop.runs, "gc never ran alongside the resolves"
        for args, (out, _) in zip(RESOLVES, outputs, strict=True):
            for result in parse_json_results(out):
                bad = check_view_files(result, bundled.get(result["name"]))
                assert bad == [], f"round {round_}, resolve {' '.join(args)}: {bad}"
        verified = run_catalog(["verify", "--deep"], env)
        assert verified.returncode == 0, f"round {round_}: {explain(verified)}"
        assert blob_mismatches(cache_dir) == [], f"round {round_}"
    assert run_catalog(["gc"], env).returncode == 0
    assert leftover_temps(cache_dir) == []


def test_resolves_of_one_view_building_it_at_once_beside_gc_never_fail_nor_hand_out_a_missing_folder(
    tmp_path: Path, long_run: bool
) -> None:
    """Rounds of five resolves of one model released together into a cache holding its blobs but no view, or holding
    a damaged view (a file dropped in, a pinned file rewritten) that all of them repair at once; three more resolving
    again and again meanwhile (warm answers once it is marked); gc looping beside them (tests/reliability/view_race.py
    forks them from one interpreter, so a round costs the resolves, not Python's start-up). Every process exits 0, and
    every path printed holds every pinned file, checked before the next round. A second builder used to rename the
    first one's finished view aside for a moment: its marker then failed ("vanished while the view was being built")
    or a path handed out was gone; a stale view was removed by each resolve that found it so. 50 small files make
    each round cheap: about 1.3 s with the machine's two cores busy."""
    manifests, data, [name] = write_generated_catalog(tmp_path / "work", "view-race", 1, files=50, unit=32)
    store = tmp_path / "store"
    upload_generated(manifests, data, [name], str(store))
    cache_dir = tmp_path / "cache"
    rounds = 200 if long_run else 32  # --reliability-long: 200 rounds, quiet or busy
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("view_race.py")),
            "--catalog",
            str(manifests),
            "--store",
            str(store),
            "--cache",
            str(cache_dir),
            "--model",
            name,
            "--rounds",
            str(rounds),
            "--processes",
            "5",
            "--readers",
            "3",
        ],
        env=cli_env({"HOME": str(tmp_path / "home")}),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, explain(done)
    report = json.loads(done.stdout)
    failed = {f"round {r['round']} ({r['kind']})": r["failed"] for r in report if r["failed"]}
    assert failed == {}, json.dumps(failed, indent=1)[:6000]
    assert len(report) == rounds and sum(r["gc_runs"] for r in report) >= rounds, "gc did not run beside the resolves"
    env = cli_env(
        {
            "CATALOG_DIR": str(manifests),
            "CATALOG_STORE": str(store),
            "CATALOG_CACHE": str(cache_dir),
            "HOME": str(tmp_path / "home"),
        }
    )
    verified = run_catalog(["verify", "--deep"], env)
    assert verified.returncode == 0, explain(verified)
    assert blob_mismatches(cache_dir) == []
    assert run_catalog(["gc"], env).returncode == 0
    assert leftover_temps(cache_dir) == []


def test_two_syncs_at_once_fill_then_repair_one_bucket(
    bundled: Catalog,
    hub,
    s3_server,
    bucket: str,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    base = {
        "HF_ENDPOINT": hub.url,
        "CATALOG_DIR": str(BUNDLED),
        "CATALOG_STORE": f"s3://{bucket}/",
        "HOME": str(tmp_path / "home"),
    }
    pins = {bundled.store_key(m, f.path): f for m in bundled for f in m.files}
    client = s3_client(s3_server.url)

    def both(*args: str) -> None:
        procs = [
            subprocess.Popen(
                catalog_cmd("sync", *args, "--part-size", "8MiB", "--concurrency", "2"),
                env=cli_env({**base, "CATALOG_CACHE": str(tmp_path / f"cache-{i}")}),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(2)
        ]
        outputs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outputs

    def consistent() -> None:
        deep = run_catalog(["sync", "--check", "--deep"], cli_env({**base, "CATALOG_CACHE": str(tmp_path / "checker")}))
        assert deep.returncode == 0, explain(deep)
        fresh = run_catalog(["sync", "--check"], cli_env({**base, "CATALOG_CACHE": str(tmp_path / "fresh-runner")}))
        assert fresh.returncode == 0, f"the recorded states disagree with the bucket: {explain(fresh)}"
        shutil.rmtree(tmp_path / "fresh-runner", ignore_errors=True)
        stored = {k: v for k, v in bucket_objects(s3_server.url, bucket).items() if not k.startswith(".model-catalog/")}
        assert stored == {k: f.size for k, f in pins.items()}

    both()  # from an empty bucket
    consistent()
    deleted = bundled.store_key(bundled.get("tiny-llama"), "config.json")
    corrupt = bundled.store_key(bundled.get("tiny-qwen2"), "model-00001-of-00002.safetensors")
    client.delete_object(Bucket=bucket, Key=deleted)
    body = client.get_object(Bucket=bucket, Key=corrupt)["Body"].read()
    client.put_object(Bucket=bucket, Key=corrupt, Body=body[:50] + bytes([body[50] ^ 1]) + body[51:])  # same size
    both("tiny-llama", "tiny-qwen2")  # both notice, both repair
    consistent()
    assert client.get_object(Bucket=bucket, Key=corrupt)["Body"].read() == body


def test_gc_never_removes_a_view_whose_marker_appears_while_it_runs(
    bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    """The race the loop above can hit, made reliable: gc reads the markers first and removes views later;
    a view built (and its marker written) between the two must survive. Thousands of markers of models
    no longer in the catalog keep gc in its marker phase long enough for one warm resolve to finish."""
    store = LocalStore(tmp_path / "store")
    upload_from_dir(bundled, "tiny-llama", sources["tiny-llama"], store)
    cache = Cache(tmp_path / "cache")
    resolve(bundled, "tiny-llama", cache=cache, store=store)  # the blobs; then only the view is rebuilt
    shutil.rmtree(cache.models)
    shutil.rmtree(cache.markers)
    stale = 5000
    for i in range(stale):
        folder = cache.markers / f"gone-{i:05d}"
        folder.mkdir(parents=True)
        (folder / "view.json").write_text(
            json.dumps({"version": 1, "name": f"gone-{i:05d}", "layout": "dir", "files": {}})
        )
    first, last = cache.markers / "gone-00000" / "view.json", cache.markers / f"gone-{stale - 1:05d}" / "view.json"
    env = cli_env({"CATALOG_DIR": str(BUNDLED), "CATALOG_CACHE": str(cache.root), "HOME": str(tmp_path / "home")})
    gc = subprocess.Popen(catalog_cmd("gc"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while first.exists() and gc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    result = resolve(bundled, "tiny-llama", cache=cache, store=store)
    in_window = last.exists()  # gc is still reading markers: it has not looked at models/ yet
    out, err = gc.communicate(timeout=120)
    assert gc.returncode == 0, err
    assert in_window, "the resolve did not land inside gc's run; the test proved nothing (raise `stale`)"
    survived = check_view_files({"path": str(result.path), "files": list(result.files)}, bundled.get("tiny-llama"))
    assert survived == [], f"gc removed a view resolved (and marked) while it ran: {survived[:2]}"
