#!/usr/bin/env bash
# Builds and runs the main example: a small C++ training loop with modhooks hooks.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
build="${MODHOOKS_BUILD_DIR:-$MODHOOKS_ROOT/build}"
cmake -S "$MODHOOKS_ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$MODHOOKS_TORCH_PREFIX" -DMODHOOKS_PYTHON="$MODHOOKS_PYTHON" >/dev/null
cmake --build "$build" -j "$MODHOOKS_JOBS" --target train_hooks
"$build/examples/train_hooks"
