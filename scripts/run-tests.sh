#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds modhooks against the pinned PyPI libtorch and runs the whole test suite with ctest.
# Extra arguments go to CMake, e.g. -DMODHOOKS_WERROR=ON.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
modhooks_configure "$@"
cmake --build "$build" -j "$MODHOOKS_JOBS"
ctest --test-dir "$build" -j "$MODHOOKS_JOBS" --output-on-failure
