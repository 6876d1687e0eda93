#!/usr/bin/env bash
# Builds modhooks against the pinned PyPI libtorch and runs the whole test suite with ctest.
# Extra arguments go to CMake, e.g. -DMODHOOKS_WERROR=ON.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
build="${MODHOOKS_BUILD_DIR:-$MODHOOKS_ROOT/build}"
cmake -S "$MODHOOKS_ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$MODHOOKS_TORCH_PREFIX" -DMODHOOKS_PYTHON="$MODHOOKS_PYTHON" "$@" >/dev/null
cmake --build "$build" -j "$MODHOOKS_JOBS"
ctest --test-dir "$build" -j "$MODHOOKS_JOBS" --output-on-failure
