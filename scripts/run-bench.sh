#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs the C++ benchmarks and their Python baselines in one go, on this machine.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
modhooks_bench_prepare
"$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/bench/python_state_bench.py" "$MODHOOKS_BENCH_CHECKPOINT"
for b in "$build"/bench/*_bench; do
  "$b" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_min_time=0.2
done
"$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/bench/python_model_io_bench.py" "$MODHOOKS_BENCH_DIR"
rm -f "$MODHOOKS_BENCH_DIR"/model_io_1GiB.safetensors "$MODHOOKS_BENCH_DIR"/model_io_1GiB.pt
"$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/bench/python_hooks_bench.py"
"$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/bench/nn_utils_bench.py"
