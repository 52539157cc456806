#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and the cuda12 extra (pip install -e '.[cuda12,test]'):
# runs the gpu-marked tests, then prints device throughput (streaming GB/s, 1000-step oscillator
# at 10^6 samples).  Usage: scripts/gpu_check.sh [python]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-python}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export EAGLE_CACHE_DIR="${EAGLE_CACHE_DIR:-$(mktemp -d)}"
unset NUMBA_ENABLE_CUDASIM
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "nvidia-smi not found: is the NVIDIA driver installed?"
"$PY" -c "import cupy, numba.cuda as c; assert c.is_available(), 'numba sees no GPU'; print('GPUs:', cupy.cuda.runtime.getDeviceCount())"
"$PY" -m pytest -q -m gpu -rs tests/test_device.py tests/test_table.py tests/test_pinned.py
"$PY" -m scripts.gpu_throughput
