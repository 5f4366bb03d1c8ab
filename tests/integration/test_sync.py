"""`catalog sync` against SeaweedFS as the S3 server, with the Hub double as the upstream."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hubdouble import HubDouble
from servers import FaultProxy, SeaweedServer

from catalog.lookup import Catalog
from resolver.stores import S3Options, make_s3_client

ROOT = Path(__file__).resolve().parents[2]


def run(
    hub: HubDouble, bucket: str, tmp_path: Path, *args: str, endpoint: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "CATALOG_DIR": str(ROOT / "manifests"),
        "CATALOG_CACHE": str(tmp_path / "cache"),
        "CATALOG_STORE": f"s3://{bucket}/",
    }
    if endpoint:
        env["AWS_ENDPOINT_URL"] = endpoint
    return subprocess.run(
        [sys.executable, "-m", "catalog", *args], capture_output=True, text=True, env=env, timeout=300
    )


def s3(s3_server: SeaweedServer):  # type: ignore[no-untyped-def]
    return make_s3_client(S3Options(endpoint_url=s3_server.url, addressing_style="path"))


def keys(s3_server: SeaweedServer, bucket: str) -> dict[str, int]:
    out = s3(s3_server).list_objects_v2(Bucket=bucket)
    return {o["Key"]: o["Size"] for o in out.get("Contents", [])}


def test_sync_from_empty_then_noop_then_resolve(
    hub: HubDouble, bucket: str, s3_server: SeaweedServer, bundled: Catalog, tmp_path: Path
) -> None:
    first = run(hub, bucket, tmp_path, "sync", "--format", "json")
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    total = sum(len(m.files) for m in bundled)
    assert len(report["uploaded"]) == total and report["errors"] == []
    stored = keys(s3_server, bucket)
    for m in bundled:
        for e in m.files:
            assert stored[bundled.store_key(m, e.path)] == e.size
    head = s3(s3_server).head_object(
        Bucket=bucket, Key=bundled.store_key(bundled.get("tiny-llama"), "model.safetensors")
    )
    assert head["Metadata"]["sha256"] == bundled.get("tiny-llama").file("model.safetensors").sha256  # type: ignore[union-attr]
    assert head["Metadata"]["hf-repo"] == "model-catalog/tiny-llama"

    hub_before = hub.hub_requests()
    # Requests are counted twice: by the tool (its report) and independently by a proxy on the wire, which
    # also sees retries the tool's own counter cannot.
    proxy = FaultProxy(int(s3_server.url.rsplit(":", 1)[1]))
    try:
        again = run(hub, bucket, tmp_path, "sync", "--format", "json", endpoint=proxy.url)
        assert again.returncode == 0, again.stderr
        noop = json.loads(again.stdout)
        assert noop["uploaded"] == [] and noop["verified"] == []
        # one listing of the bucket; the states sync recorded are still cached locally under the same ETags
        assert noop["requests"] == {"ListObjectsV2": 1}
        assert sum(proxy.requests.values()) == 1, proxy.requests
        proxy.requests.clear()
        fresh_runner = run(hub, bucket, tmp_path / "elsewhere", "sync", "--format", "json", endpoint=proxy.url)
        assert json.loads(fresh_runner.stdout)["requests"] == {
            "ListObjectsV2": 1,
            "GetObject": len(bundled),
        }  # one small GET per model
        assert sum(proxy.requests.values()) == 1 + len(bundled), proxy.requests
    finally:
        proxy.close()
    assert hub.hub_requests() == hub_before
    check = run(hub, bucket, tmp_path, "sync", "--check")
    assert check.returncode == 0 and "No changes: the store matches the manifests." in check.stdout

    for m in bundled:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "catalog",
                "--catalog",
                str(ROOT / "manifests"),
                "resolve",
                m.name,
                "--store",
                f"s3://{bucket}/",
                "--cache",
                str(tmp_path / "resolve-cache"),
                "--materialize-weights",
            ],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr


def test_each_drift_is_detected_and_repaired(
    hub: HubDouble, bucket: str, s3_server: SeaweedServer, bundled: Catalog, tmp_path: Path
) -> None:
    assert run(hub, bucket, tmp_path, "sync", "tiny-llama", "tiny-qwen2").returncode == 0
    client = s3(s3_server)
    llama, qwen = bundled.get("tiny-llama"), bundled.get("tiny-qwen2")
    deleted = bundled.store_key(llama, "config.json")
    corrupt = bundled.store_key(llama, "model.safetensors")
    truncated = bundled.store_key(qwen, "config.json")
    extra = bundled.store_key(qwen, "stray.bin")
    orphan = "someone-else/model/weights.bin"
    client.delete_object(Bucket=bucket, Key=deleted)
    body = client.get_object(Bucket=bucket, Key=corrupt)["Body"].read()
    client.put_object(Bucket=bucket, Key=corrupt, Body=body[:100] + bytes([body[100] ^ 1]) + body[101:])  # same size
    config = client.get_object(Bucket=bucket, Key=truncated)["Body"].read()
    client.put_object(Bucket=bucket, Key=truncated, Body=config[:-1])  # another size
    client.put_object(Bucket=bucket, Key=extra, Body=b"x")
    client.put_object(Bucket=bucket, Key=orphan, Body=b"y")

    check = run(hub, bucket, tmp_path, "sync", "--check", "--format", "json")
    assert check.returncode == 1
    actions = {i["key"]: i["action"] for i in json.loads(check.stdout)["plan"]["items"] if i["action"] != "ok"}
    expected = {deleted: "upload", corrupt: "verify", truncated: "replace", extra: "extra", orphan: "orphan"}
    assert {k: actions.get(k) for k in expected} == expected
    synced = (bundled.store_key(llama), bundled.store_key(qwen))
    assert {k for k in actions if k.startswith(synced)} == set(expected) - {orphan}  # nothing else drifted
    # --deep hashes what is there: the same-size corruption is then a replace, not a verify.
    deep = run(hub, bucket, tmp_path, "sync", "tiny-llama", "--check", "--deep", "--format", "json")
    deep_actions = {i["key"]: i["action"] for i in json.loads(deep.stdout)["plan"]["items"]}
    assert deep.returncode == 1 and deep_actions[corrupt] == "replace"

    repaired = run(hub, bucket, tmp_path, "sync", "tiny-llama", "tiny-qwen2", "--format", "json")
    assert repaired.returncode == 0, repaired.stderr
    out = json.loads(repaired.stdout)
    assert sorted(out["uploaded"]) == sorted([deleted, corrupt, truncated]) and out["deleted"] == []
    assert extra in keys(s3_server, bucket)  # extra objects stay without --prune
    assert client.get_object(Bucket=bucket, Key=corrupt)["Body"].read() == body
    assert client.get_object(Bucket=bucket, Key=truncated)["Body"].read() == config

    pruned = run(hub, bucket, tmp_path, "sync", "tiny-llama", "tiny-qwen2", "--prune", "--format", "json")
    assert json.loads(pruned.stdout)["deleted"] == [extra]
    assert orphan in keys(s3_server, bucket)  # not in scope of a named sync; and orphans need their own opt-in
    whole = run(hub, bucket, tmp_path, "sync", "--prune", "--dry-run")
    assert "someone-else/model/weights.bin" in whole.stdout and orphan in keys(s3_server, bucket)


def test_max_delete_aborts_with_nothing_deleted(
    hub: HubDouble, bucket: str, s3_server: SeaweedServer, bundled: Catalog, tmp_path: Path
) -> None:
    assert run(hub, bucket, tmp_path, "sync", "tiny-llama").returncode == 0
    client = s3(s3_server)
    for i in range(5):
        client.put_object(Bucket=bucket, Key=bundled.store_key(bundled.get("tiny-llama"), f"junk-{i}.txt"), Body=b"j")
    before = keys(s3_server, bucket)
    done = run(hub, bucket, tmp_path, "sync", "tiny-llama", "--prune", "--max-delete", "3")
    assert done.returncode == 2 and "deletes 5 objects, more than --max-delete 3; nothing was deleted" in done.stderr
    assert keys(s3_server, bucket) == before


def test_saved_plan_applies_exactly_and_is_refused_after_the_bucket_changed(
    hub: HubDouble, bucket: str, s3_server: SeaweedServer, bundled: Catalog, tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    assert run(hub, bucket, tmp_path, "sync", "tiny-qwen2", "--out", str(plan)).returncode == 0
    assert keys(s3_server, bucket) == {}  # --out changes nothing
    intruder = bundled.store_key(bundled.get("tiny-qwen2"), "x")
    s3(s3_server).put_object(Bucket=bucket, Key=intruder, Body=b"new")
    stale = run(hub, bucket, tmp_path, "sync", "--apply", str(plan))
    assert stale.returncode == 2 and "the bucket changed since the plan was made" in stale.stderr
    assert list(keys(s3_server, bucket)) == [intruder]  # nothing was done
    s3(s3_server).delete_object(Bucket=bucket, Key=intruder)
    applied = run(hub, bucket, tmp_path, "sync", "--apply", str(plan), "--format", "json")
    assert applied.returncode == 0, applied.stderr
    assert len(json.loads(applied.stdout)["uploaded"]) == len(json.loads(plan.read_text())["items"])


def test_a_plan_made_from_a_folder_is_applied_from_that_folder_with_no_hub_request(
    hub: HubDouble, bucket: str, s3_server: SeaweedServer, bundled: Catalog, sources: dict[str, Path], tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    made = run(
        hub, bucket, tmp_path, "sync", "tiny-llama", "--from-dir", str(sources["tiny-llama"]), "--out", str(plan)
    )
    assert made.returncode == 0, made.stderr
    assert json.loads(plan.read_text())["from_dir"] == str(sources["tiny-llama"].resolve())
    before = hub.hub_requests()
    applied = run(hub, bucket, tmp_path, "sync", "--apply", str(plan))  # no --from-dir: the plan says where
    assert applied.returncode == 0, applied.stderr
    assert hub.hub_requests() == before
    assert sorted(keys(s3_server, bucket)) == sorted(
        [bundled.store_key(bundled.get("tiny-llama"), f.path) for f in bundled.get("tiny-llama").files]
        + [k for k in keys(s3_server, bucket) if k.startswith(".model-catalog/")]
    )
    moved = json.loads(plan.read_text()) | {"from_dir": str(tmp_path / "gone")}
    plan.write_text(json.dumps(moved))
    gone = run(hub, bucket, tmp_path, "sync", "--apply", str(plan))
    assert gone.returncode == 2 and "which is no folder now" in gone.stderr


def test_hub_429_is_waited_out_and_a_truncated_file_fails_alone(
    hub: HubDouble, bucket: str, s3_server: SeaweedServer, bundled: Catalog, tmp_path: Path
) -> None:
    hub.fail(429, times=1, retry_after=0.3, path_contains="tiny-qwen2")
    hub.truncate(
        "tiny-llama/resolve/" + bundled.get("tiny-llama").source.revision + "/model.safetensors",
        after_bytes=0,
        times=100,
    )
    done = run(hub, bucket, tmp_path, "sync", "tiny-llama", "tiny-qwen2", "--format", "json")
    assert done.returncode == 1
    out = json.loads(done.stdout)
    bad = bundled.store_key(bundled.get("tiny-llama"), "model.safetensors")
    assert [e["key"] for e in out["errors"]] == [bad]
    assert "tiny-llama/model.safetensors" in out["errors"][0]["error"]
    stored = keys(s3_server, bucket)
    assert bad not in stored
    assert len(out["uploaded"]) == len(bundled.get("tiny-llama").files) - 1 + len(bundled.get("tiny-qwen2").files)


def test_a_sync_killed_mid_upload_leaves_nothing_partial_and_a_rerun_completes(
    hub: HubDouble, bucket: str, s3_server: SeaweedServer, bundled: Catalog, tmp_path: Path
) -> None:
    proxy = FaultProxy(int(s3_server.url.rsplit(":", 1)[1]))
    key = bundled.store_key(bundled.get("all-minilm-l6-v2"), "model.safetensors")
    proc = subprocess.Popen(
        [sys.executable, "-m", "catalog", "sync", "all-minilm-l6-v2", "--part-size", "8MiB", "--concurrency", "2"],
        env={
            **os.environ,
            "HF_ENDPOINT": hub.url,
            "CATALOG_DIR": str(ROOT / "manifests"),
            "CATALOG_CACHE": str(tmp_path / "cache"),
            "CATALOG_STORE": f"s3://{bucket}/",
            "AWS_ENDPOINT_URL": proxy.url,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while proxy.requests[f"PUT /{bucket}/{key}"] < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the sync ended before it could be killed mid-upload"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proxy.close()
    assert key not in keys(s3_server, bucket)  # parts of an unfinished multipart upload are never visible
    rerun = run(hub, bucket, tmp_path, "sync", "all-minilm-l6-v2", "--part-size", "8MiB")
    assert rerun.returncode == 0, rerun.stderr
    deep = run(hub, bucket, tmp_path, "sync", "all-minilm-l6-v2", "--check", "--deep")
    assert deep.returncode == 0, deep.stdout


def test_two_syncs_at_once_leave_a_consistent_bucket(hub: HubDouble, bucket: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "CATALOG_DIR": str(ROOT / "manifests"),
        "CATALOG_STORE": f"s3://{bucket}/",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "catalog", "sync", "tiny-llama", "tiny-qwen2", "tiny-llama-sharded"],
            env={**env, "CATALOG_CACHE": str(tmp_path / f"cache-{i}")},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    deep = run(hub, bucket, tmp_path, "sync", "tiny-llama", "tiny-qwen2", "tiny-llama-sharded", "--check", "--deep")
    assert deep.returncode == 0, deep.stdout
