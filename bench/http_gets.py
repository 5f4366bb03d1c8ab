"""Benchmark: the HTTP store's cost per GET (the transport's hot path), against the previous http.client store.

    .venv/bin/python bench/http_gets.py [--files 1000] [--kib 4] [--rounds 5] [--threads 1,16] [--baseline REV]

nginx (Debian's nginx-light) serves a folder of small files on loopback, pinned to core 1 while the client runs on
core 0 (`taskset`), so the client's CPU is its own. Each round reads every file once with `HttpStore.open` and
`readinto` into a 256 KiB buffer (what the transfer does for a small file), on 1 and on 16 threads, first through
this tree's store (urllib3, the one transport), then through the store of git revision `--baseline` (default
main's, http.client with one keep-alive connection per thread) loaded from `git show`. Reported: the client's CPU
per GET (process time / GETs), the wall time and the GETs that failed and were asked again (the transfer retries
those after a backoff, not taken here), medians over the rounds. The rounds of the two stores alternate.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from servers import free_port

NGINX = """daemon off; worker_processes 1; pid {tmp}/nginx.pid; error_log {tmp}/error.log;
events {{ worker_connections 1024; }}
http {{ access_log off; client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy; fastcgi_temp_path {tmp}/fcgi;
  uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi; keepalive_requests 1000000;
  server {{ listen 127.0.0.1:{port}; root {root}; }} }}
"""


def load_store(source: str, name: str) -> Any:
    path = Path(tempfile.mkdtemp(prefix="bench-http-")) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_round(store: Any, keys: list[str], threads: int) -> tuple[float, float, int]:
    """Every key read once: (client CPU, wall, GETs that failed and were asked again, as the transfer would)."""
    local = threading.local()
    failed: list[str] = []

    def read(key: str) -> int:
        buffer = getattr(local, "buffer", None) or memoryview(bytearray(256 * 1024))
        local.buffer = buffer
        for attempt in (0, 1):
            try:
                stream = store.open(key)
                break
            except Exception:
                if attempt:
                    raise
                failed.append(key)
        total = 0
        while count := stream.readinto(buffer):
            total += count
        stream.close()
        return total

    cpu, wall = time.process_time(), time.perf_counter()
    if threads == 1:
        for key in keys:
            read(key)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(read, keys))
    return time.process_time() - cpu, time.perf_counter() - wall, len(failed)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--kib", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", default="1,16")
    parser.add_argument("--baseline", default="main")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-http-"))
    work.chmod(0o755)  # nginx's worker (another user) reads the files
    root = work / "root" / "m"
    root.mkdir(parents=True)
    keys = []
    for i in range(args.files):
        (root / f"f{i:05d}.bin").write_bytes(os.urandom(args.kib * 1024))
        keys.append(f"m/f{i:05d}.bin")
    port = free_port()
    (work / "nginx.conf").write_text(NGINX.format(tmp=work, port=port, root=work / "root"))
    server = subprocess.Popen(
        ["taskset", "-c", "1", "nginx", "-c", str(work / "nginx.conf"), "-p", str(work)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.sched_setaffinity(0, {0})
    try:
        time.sleep(0.5)
        url = f"http://127.0.0.1:{port}/"
        current = load_store((ROOT / "resolver/stores/http.py").read_text(), "http_current")
        baseline = load_store(
            subprocess.run(
                ["git", "show", f"{args.baseline}:resolver/stores/http.py"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            ).stdout,
            "http_baseline",
        )
        print(f"{args.files} GETs of {args.kib} KiB from nginx on loopback, {args.rounds} rounds (medians)\n")
        print("| store | threads | client CPU per GET | wall | GETs failed and asked again |")
        print("|---|---|---|---|---|")
        for threads in (int(t) for t in args.threads.split(",")):
            stores = {
                "this tree (urllib3 transport)": current.from_url(url),
                f"{args.baseline} (http.client)": baseline.from_url(url),
            }
            runs: dict[str, list[tuple[float, float, int]]] = {label: [] for label in stores}
            for store in stores.values():
                one_round(store, keys[:50], threads)  # warm the pool
            for _ in range(args.rounds):
                for label, store in stores.items():
                    runs[label].append(one_round(store, keys, threads))
            for label, results in runs.items():
                cpu = statistics.median(r[0] for r in results) / len(keys) * 1e6
                wall = statistics.median(r[1] for r in results)
                again = statistics.median(r[2] for r in results)
                print(f"| {label} | {threads} | {cpu:.0f} us | {wall:.3f} s | {again:.0f} |")
    finally:
        server.terminate()
        server.wait(5)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
