#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds and runs the examples: a small C++ training loop with modhooks hooks; a checkpoint that
# Python writes here, loaded into a C++ model whose layers have other names; a ResNet that Python
# traces here, whose inner blocks C++ hooks and checks against Python's eager hooks.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
modhooks_configure
cmake --build "$build" -j "$MODHOOKS_JOBS" --target train_hooks python_checkpoint inspect_torchscript
"$build/examples/train_hooks"
"$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/examples/write_checkpoint.py" "$build/examples/python-checkpoint"
"$build/examples/python_checkpoint" "$build/examples/python-checkpoint"
"$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/examples/write_resnet.py" "$build/examples/python-resnet"
"$build/examples/inspect_torchscript" "$build/examples/python-resnet"
