"""Benchmark: what requiring signatures costs a resolve, cold and warm.

    .venv/bin/python bench/signature_check.py [--rounds 7]

A temp copy of the bundled catalog, tiny-llama in a folder store, signed with an EC P-256 key (and, for the
certificate rows, by a P-256 certificate under a P-384 root). Each round runs in a fresh process, as CI does:

- check: the gate alone (resolver.signatures.require, its imports included) in a process that has loaded the
  catalog, as a cold resolve has (no verdict is kept across processes: each process verifies);
- cold resolve: `catalog resolve tiny-llama` into an empty cache, signatures required or not;
- warm resolve: the same call answered by the warm index, signatures required or not; and the warm lookup alone
  (`catalog_app.warm.answer`) inside the process.

Medians with min-max over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

GATE = """
import json, logging, sys, time
from pathlib import Path
import catalog  # loaded before any command runs, as the CLI's are
from catalog.settings import Settings
cat = catalog.load(sys.argv[1], only=["tiny-llama"])
settings = Settings.from_process()
start, cpu = time.perf_counter(), time.process_time()
from resolver.signatures import require
require(cat, ["tiny-llama"], cache_root=Path(sys.argv[2]), settings=settings)
print(json.dumps({"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu}))
"""
WARM = """
import json, sys, time
start, cpu = time.perf_counter(), time.process_time()
from catalog_app import warm
answer = warm.answer(sys.argv[1:])
print(json.dumps({"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu, "answered": answer is not None}))
"""


Timing = tuple[float, float]  # wall seconds, CPU seconds


def stats(values: list[Timing]) -> str:
    wall = [w * 1000 for w, _ in values]
    cpu = statistics.median(c * 1000 for _, c in values)
    return f"{statistics.median(wall):8.1f} ms  ({min(wall):.1f}-{max(wall):.1f})   CPU {cpu:7.1f} ms"


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    from signing_keys import key_pair, pki

    import catalog
    from resolver.examples import write_model
    from resolver.stores import open_store
    from resolver.upload import upload_from_dir

    work = Path(tempfile.mkdtemp(prefix="catalog-signature-bench-"))
    try:
        bundled = catalog.load(ROOT / "manifests")
        store = work / "store"
        upload_from_dir(bundled, "tiny-llama", write_model("tiny-llama", work / "source"), open_store(str(store)))
        keys, org = key_pair(work / "keys"), pki(work / "pki", "org")
        catalogs = {}
        for kind in ("plain", "key", "certificate"):
            folder = work / kind / "manifests"
            shutil.copytree(ROOT / "manifests", folder)
            for stray in folder.glob("*.sig"):
                stray.unlink()
            catalogs[kind] = folder
        base = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_") and k != "PYTHONDONTWRITEBYTECODE"}
        # Compiled modules cached as an installed package has them (in the temp folder, not beside the sources).
        base |= {
            "HOME": str(work / "home"),
            "CATALOG_STORE": str(store),
            "PYTHONPATH": str(ROOT),
            "PYTHONPYCACHEPREFIX": str(work / "pycache"),
        }
        env = {kind: {**base, "CATALOG_DIR": str(folder)} for kind, folder in catalogs.items()}
        with open(catalogs["key"] / "catalog.yaml", "a") as f:
            f.write(f"signatures: required\ntrusted_keys: [{keys.public}]\n")
        with open(catalogs["certificate"] / "catalog.yaml", "a") as f:
            f.write(
                f"signatures: required\ntrusted_roots: [{org.root}]\n"
                "trusted_identities: [{identity: CN=org signer, issuer: CN=org intermediate}]\n"
            )
        cli = [sys.executable, "-m", "catalog"]
        subprocess.run(
            [*cli, "sign", "tiny-llama", "--private-key", str(keys.private)],
            env=env["key"],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [*cli, "sign", "tiny-llama", "--private-key", str(org.key), "--certificate", str(org.chain)],
            env=env["certificate"],
            check=True,
            capture_output=True,
        )

        def gate(kind: str) -> Timing:
            cache = work / "gate-cache"
            done = subprocess.run(
                [sys.executable, "-c", GATE, str(catalogs[kind]), str(cache)],
                env=env[kind],
                check=True,
                capture_output=True,
                text=True,
            )
            result = json.loads(done.stdout)
            return float(result["seconds"]), float(result["cpu"])

        def resolve(kind: str, cache: Path) -> Timing:
            start, cpu = time.perf_counter(), child_cpu()
            subprocess.run(
                [*cli, "resolve", "tiny-llama"],
                env={**env[kind], "CATALOG_CACHE": str(cache)},
                check=True,
                capture_output=True,
            )
            return time.perf_counter() - start, child_cpu() - cpu

        def cold(kind: str) -> Timing:
            cache = work / f"cold-{kind}"
            shutil.rmtree(cache, ignore_errors=True)
            return resolve(kind, cache)

        def warm_lookup(kind: str) -> Timing:
            done = subprocess.run(
                [sys.executable, "-c", WARM, "resolve", "tiny-llama"],
                env={**env[kind], "CATALOG_CACHE": str(work / f"warm-{kind}")},
                check=True,
                capture_output=True,
                text=True,
            )
            result = json.loads(done.stdout)
            assert result["answered"], "the warm index did not answer"
            return float(result["seconds"]), float(result["cpu"])

        load = os.getloadavg()
        rows: list[tuple[str, list[Timing]]] = []
        for kind in ("key", "certificate"):
            gate(kind)  # warm the page cache
            rows.append((f"check, {kind} signature", [gate(kind) for _ in range(args.rounds)]))
        for kind in ("plain", "key"):
            cold(kind)
            rows.append(
                (
                    f"cold resolve, {'signatures required' if kind == 'key' else 'no signatures'}",
                    [cold(kind) for _ in range(args.rounds)],
                )
            )
        for kind in ("plain", "key"):
            resolve(kind, work / f"warm-{kind}")  # records the warm entry
            label = "signatures required" if kind == "key" else "no signatures"
            rows.append((f"warm resolve, {label}", [resolve(kind, work / f"warm-{kind}") for _ in range(args.rounds)]))
            rows.append((f"warm lookup alone, {label}", [warm_lookup(kind) for _ in range(args.rounds)]))
        print(
            f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{args.rounds} rounds: wall median (min-max), CPU median; load average before "
            f"{load[0]:.1f}, after {os.getloadavg()[0]:.1f}"
        )
        for label, values in rows:
            print(f"{label:45s} {stats(values)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
