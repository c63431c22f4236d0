#!/bin/sh
# GPU smoke test (issue 4): the standalone site and one agent with real NVML discovery run a
# PyTorch matrix product through the five steps. Needs an NVIDIA GPU, its driver and PyTorch.
set -eu
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" scripts/gpu_smoke.py "$@"
