"""Benchmark: `catalog validate` over 1,000 generated manifests vs `yaml.safe_load` alone on the same files.

    .venv/bin/python bench/validate_1000.py [--count 1000] [--files-per-model 12]

Writes the manifests to a temp folder, then times (best of 3): yaml.safe_load of every file; the
C-accelerated loader (the floor for any YAML-based tool); and the full validation (parse with line
numbers, schema, every rule, cross-manifest checks) in-process and as the `catalog validate` CLI.
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import SETTINGS

from catalog.loading import load_dir


def write(root: Path, count: int, files_per_model: int) -> Path:
    folder = root / "manifests"
    folder.mkdir()
    (folder / "catalog.yaml").write_text(SETTINGS)
    for i in range(count):
        name = f"model-{i:04d}"
        rev = hashlib.sha1(name.encode()).hexdigest()
        files = "".join(
            f"  - path: {f'model-{j:05d}-of-{files_per_model:05d}.safetensors' if j else 'config.json'}\n"
            f"    size: {1000 + j}\n    sha256: {hashlib.sha256(f'{name}{j}'.encode()).hexdigest()}\n"
            for j in range(files_per_model)
        )
        (folder / f"{name}.yaml").write_text(
            f"# generated for the benchmark\nname: {name}\ndescription: benchmark model {i}\n"
            f"source:\n  hf_repo: org/{name}\n  revision: {rev}\n"
            f"s3_prefix: s3://ci-bucket/org/{name}/{rev}/\nload_format: safetensors\n"
            f"gpu: {{class: cpu}}\ntags: [bench]\nfiles:\n{files}"
        )
    return folder


def best(fn, repeat: int = 3) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--files-per-model", type=int, default=12)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = write(Path(tmp), args.count, args.files_per_model)
        paths = sorted(folder.glob("model-*.yaml"))

        def safe_load() -> None:
            for p in paths:
                yaml.safe_load(p.read_text())

        def c_load() -> None:
            for p in paths:
                yaml.load(p.read_text(), Loader=yaml.CSafeLoader)

        def validate() -> None:
            assert load_dir(folder).ok

        def cli() -> None:
            subprocess.run(
                [sys.executable, "-m", "catalog", "--catalog", str(folder), "validate"], check=True, capture_output=True
            )

        t_safe, t_c, t_val, t_cli = best(safe_load), best(c_load), best(validate), best(cli)
    print(
        f"machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}, PyYAML {yaml.__version__}"
    )
    print(f"{args.count} manifests x {args.files_per_model} files")
    print(f"yaml.safe_load alone          {t_safe * 1000:8.0f} ms")
    print(f"yaml CSafeLoader alone        {t_c * 1000:8.0f} ms")
    print(f"catalog validate (in process) {t_val * 1000:8.0f} ms   {t_val / t_safe:.2f}x safe_load")
    print(f"catalog validate (CLI)        {t_cli * 1000:8.0f} ms   {t_cli / t_safe:.2f}x safe_load")


if __name__ == "__main__":
    main()
