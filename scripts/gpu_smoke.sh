#!/bin/sh
# GPU smoke test (issues 4, 11): the standalone site and one agent with real NVML discovery run a
# PyTorch matrix product and nvidia-smi through the five steps, inside the job sandbox, and check
# that only the leased GPU is visible there. Needs an NVIDIA GPU, its driver, PyTorch in the venv,
# and the sandbox tools (scripts/sandbox_tools.sh installs them).
#
#   scripts/gpu_smoke.sh            # PYTHON=/path/to/python to use another interpreter
#
# Exits 2 with a message saying what is missing (no GPU, no driver, no PyTorch, no venv), 1 when
# a step of the smoke test fails, 0 when it passed ("SMOKE OK").
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.."
python=${PYTHON:-.venv/bin/python}

fail() {
  echo "gpu_smoke: $*" >&2
  exit 2
}

[ -x "$python" ] || fail "no Python at $python (run 'make .venv/.installed' first, or set PYTHON)"
command -v nvidia-smi >/dev/null 2>&1 || fail "nvidia-smi not found: this host has no NVIDIA driver"
gpus=$(nvidia-smi -L 2>&1) || fail "nvidia-smi -L failed (no GPU, or the driver is not loaded): $gpus"
case $gpus in
  GPU*) ;;
  *) fail "nvidia-smi -L lists no GPU: $gpus" ;;
esac
echo "host GPUs:"
echo "$gpus"
"$python" -c 'import torch' 2>/dev/null \
  || fail "PyTorch is not installed for $python (e.g. $python -m pip install torch)"
"$here/sandbox_tools.sh" || fail "the job sandbox's tools are missing (see above)"
# CUDA needs /dev/nvidia-uvm; the driver creates it on the first CUDA use by root, which a job (no
# setuid in the sandbox) cannot do: create it now when it is missing, as nvidia-persistenced would.
if [ ! -e /dev/nvidia-uvm ] && [ "$(id -u)" -eq 0 ] && command -v nvidia-modprobe >/dev/null 2>&1; then
  nvidia-modprobe -u -c=0 || echo "gpu_smoke: nvidia-modprobe -u could not create /dev/nvidia-uvm" >&2
fi
[ -e /dev/nvidia-uvm ] || echo "gpu_smoke: warning: /dev/nvidia-uvm is missing; CUDA in the sandbox may fail" >&2
exec "$python" scripts/gpu_smoke.py "$@"
