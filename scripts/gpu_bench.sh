#!/usr/bin/env bash
# The GPU arms of the benchmark on a machine with an NVIDIA GPU, in under five minutes:
# DeviceKernel in one process and DaskPartition(inner=DeviceKernel) on dask-cuda workers (one per
# GPU), against the one-thread HostTeam baseline, at 1e6 and 1e7 samples.  Prints the same table
# as `python -m benchmarks` and writes results.csv / results.png into the folder given (default
# gpu-bench-out).  Needs the cuda12 extra (numba-cuda, cupy, dask-cuda) and the dask extra.
#
#   scripts/gpu_bench.sh [OUT_DIR] [extra python -m benchmarks options...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-gpu-bench-out}"
shift || true
python="${PYTHON:-python3}"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_bench: no NVIDIA GPU found (nvidia-smi); the GPU arms would all be skipped" >&2
fi
nvidia-smi -L 2>/dev/null || true
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
export EAGLE_CACHE_DIR="${EAGLE_CACHE_DIR:-${TMPDIR:-/tmp}/eagle-cache-gpu-bench}"
cd "$here"
exec timeout 290 "$python" -m benchmarks --gpu-only --out "$out" "$@"
