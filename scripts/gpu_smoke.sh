#!/bin/sh
# GPU smoke test (issues 4, 11): the standalone site and one agent with real NVML discovery run a
# PyTorch matrix product and nvidia-smi through the five steps, inside the job sandbox, and check
# that only the leased GPU is visible there. Needs an NVIDIA GPU, its driver, PyTorch, and the
# sandbox tools (scripts/sandbox_tools.sh installs them).
set -eu
"$(dirname "$0")/sandbox_tools.sh"
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" scripts/gpu_smoke.py "$@"
