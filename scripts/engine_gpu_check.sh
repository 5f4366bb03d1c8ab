#!/usr/bin/env bash
# The engine tier (tests/engine/) with vLLM's CUDA build, on a GPU machine.
#
# Needs: a Python (3.10+) in which `import vllm` works with CUDA (PYTHON=..., default python3), and the package
# index (or a wheelhouse in PIP_FIND_LINKS) for the project's test dependencies. It installs the project into a
# virtual environment beside the repo that sees that Python's packages (vLLM, torch), so nothing of the machine's
# own environment changes, then runs the tier exactly as the CPU suite does: float32 on both sides, tokens equal
# to transformers' reference. The CPU build's workarounds are not applied on a GPU (the worker checks the platform).
#
# With fewer than two GPUs the per-rank sharded model (tensor parallel 2) cannot load: its cases, and the
# check-load agreement test that loads every bundled model, are deselected and said so.
#
#   scripts/engine_gpu_check.sh [extra pytest args]      # report: engine-gpu-report.txt
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
"$PYTHON" -c "import torch, vllm; assert torch.cuda.is_available(), 'no CUDA device'; print('vllm', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(0))"
VENV=.venv-gpu
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv --system-site-packages "$VENV"
# The project and its test dependencies; torch and vLLM come from the system site packages, never replaced.
"$VENV/bin/python" -m pip install -q -e '.[dev,loaders]' "torch==$("$PYTHON" -c 'import torch; print(torch.__version__.split("+")[0])')"
GPUS="$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())')"
SELECT=()
if [ "$GPUS" -lt 2 ]; then
  echo "only $GPUS GPU(s): tiny-llama-sharded needs 2 (tensor parallel 2); its cases and the check-load agreement are deselected" >&2
  SELECT=(-k "not tiny-llama-sharded and not check_load_and_the_engine_agree")
fi
set -o pipefail
"$VENV/bin/python" -m pytest -n 0 -p no:cacheprovider -rA tests/engine "${SELECT[@]}" "$@" 2>&1 | tee engine-gpu-report.txt
