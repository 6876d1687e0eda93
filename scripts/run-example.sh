#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds and runs the examples: a small C++ training loop with modhooks hooks; a checkpoint that
# Python writes here, loaded into a C++ model whose layers have other names; a ResNet that Python
# traces here, whose inner blocks C++ hooks and checks against Python's eager hooks; and
# torchvision's resnet18 that Python exports with hook points and compiles with AOTInductor here,
# whose blocks C++ hooks inside the compiled package, checked against Python's eager hooks; the
# same model as an ExecuTorch program lowered with XNNPACK, hooked inside ExecuTorch's runtime;
# a weight-normed convolution stack trained in Python, resumed in C++ and resumed again in
# Python; a three-block model trained on 2 ranks started by torchrun, sharded by
# modhooks::dist::fully_shard as Python's fully_shard shards it, whose every rank's shards and
# full state dict equal those of Python's run bitwise (it prints the compare's verdict); and a
# small model's training step dumped by msprobe in Python and by its C++ port with
# modhooks::probe, whose dumps `msprobe compare` lines up (it prints compare's verdict: every row
# passes), then again with a C++ port whose GELU computes otherwise, which compare names (where
# msprobe is not installed, it says so and skips this last example).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
modhooks_configure
cmake --build "$build" -j "$MODHOOKS_JOBS" --target train_hooks python_checkpoint inspect_torchscript \
  inspect_exported inspect_executorch weight_norm_resume probe_compare fsdp_train
"$build/examples/train_hooks"
"$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/examples/write_checkpoint.py" "$build/examples/python-checkpoint"
"$build/examples/python_checkpoint" "$build/examples/python-checkpoint"
"$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/examples/write_resnet.py" "$build/examples/python-resnet"
"$build/examples/inspect_torchscript" "$build/examples/python-resnet"
PYTHONPATH="$MODHOOKS_ROOT/python" "$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/examples/inspect_exported.py" \
  "$build/examples/python-exported"
"$build/examples/inspect_exported" "$build/examples/python-exported"
PYTHONPATH="$MODHOOKS_ROOT/python" "$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/examples/inspect_executorch.py" \
  "$build/examples/python-executorch"
"$build/examples/inspect_executorch" "$build/examples/python-executorch"
"$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/examples/weight_norm_resume.py" start "$build/examples/weight-norm-resume"
"$build/examples/weight_norm_resume" "$build/examples/weight-norm-resume"
"$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/examples/weight_norm_resume.py" finish "$build/examples/weight-norm-resume"
fsdp_dir="$build/examples/fsdp-train"
"$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/examples/fsdp_train.py" python "$fsdp_dir"
"$(dirname "$MODHOOKS_PYTHON")/torchrun" --no-python --standalone --nproc-per-node 2 \
  "$build/examples/fsdp_train" "$fsdp_dir"
"$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/examples/fsdp_train.py" compare "$fsdp_dir"
probe_dir="$build/examples/probe-compare"
probe_status=0
"$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/examples/probe_compare.py" python "$probe_dir" || probe_status=$?
if ((probe_status != 77)); then
  ((probe_status == 0)) || exit "$probe_status"
  "$build/examples/probe_compare" "$probe_dir"
  "$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/examples/probe_compare.py" compare "$probe_dir/dump_cpp" \
    "$probe_dir/dump_python"
  "$build/examples/probe_compare" "$probe_dir" --skew
  "$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/examples/probe_compare.py" compare "$probe_dir/dump_cpp_skew" \
    "$probe_dir/dump_python" --expect Module.act.GELU.forward.0
fi
