#!/usr/bin/env bash
# The device code as PTX, with no GPU and no CUDA driver: numba-cuda's compiler (NVVM, libdevice,
# nvJitLink from the CUDA 12 wheels) in its own virtualenv, .venv-cuda (made when missing), then
# tests/test_ptx.py in it -- every suite kernel for sm_90 and sm_80, no FMA contraction unless
# declared, @numba.njit helpers in device code.  Prints the per-kernel table and pytest's summary.
# Usage: scripts/ptx_check.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${EAGLE_PTX_VENV:-.venv-cuda}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
# what to install: the project's own 'ptx' extra where pyproject has one, else numba-cuda's wheels
if grep -Eq '^ptx *=' pyproject.toml; then
    SPEC=(-e '.[test,ptx]')
else
    SPEC=(-e '.[test]' 'numba-cuda[cu12]>=0.20')
fi
if [ ! -x "$VENV/bin/python" ]; then
    start=$SECONDS
    python3 -m venv "$VENV"
    echo '*' > "$VENV/.gitignore"          # never committed, whatever .gitignore says
    "$VENV/bin/pip" install -q "${SPEC[@]}"
    echo "ptx venv: $VENV made in $((SECONDS - start)) s, $(du -sh "$VENV" | cut -f1)"
elif ! "$VENV/bin/python" -c 'import numba_cuda, pytest' 2>/dev/null; then
    "$VENV/bin/pip" install -q "${SPEC[@]}"
fi
# no driver is probed or used: numba-cuda compiles for a compute capability, not a device
unset NUMBA_ENABLE_CUDASIM
export NUMBA_CUDA_DRIVER=/nonexistent/libcuda.so
export EAGLE_REQUIRE_PTX=1
if [ -z "${EAGLE_CACHE_DIR:-}" ]; then
    EAGLE_CACHE_DIR="$(mktemp -d)"
    trap 'rm -rf "$EAGLE_CACHE_DIR"' EXIT
fi
export EAGLE_CACHE_DIR
"$VENV/bin/python" -m tests.test_ptx || true      # the table; the verdict is pytest's
"$VENV/bin/python" -m pytest -q -rfEs -p no:cacheprovider tests/test_ptx.py "$@"
