#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Writes docs/performance.md from one run of the benchmarks and their Python baselines, on this
# machine: builds them, exports the packages and programs aoti_bench and executorch_bench time,
# then bench/perf_page.py runs every case (the call hooks in 10 fresh processes) on one core, one
# intra-op thread. About three quarters of an hour on two cores; run it on an otherwise idle
# machine. Arguments go to perf_page.py: `--sections REGEX` runs the sections whose title
# matches and puts them in place of theirs on the page (`--sections probe`); others, such as
# `--processes 3 --filter Identity` for a quick try, write into the build folder instead.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
modhooks_bench_prepare
out="$MODHOOKS_ROOT/docs/performance.md"
if (($#)) && [[ $1 != --sections ]]; then out="$build/performance.md"; fi
# The last core: the set-up's own processes and the system's tend to the first. (`nproc` alone
# would count OMP_NUM_THREADS, which is 1 here.)
core=$(($(nproc --all) - 1))
taskset -c "$core" "$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/bench/perf_page.py" "$build" "$out" "$@"
rm -f "$MODHOOKS_BENCH_DIR"/model_io_1GiB.safetensors "$MODHOOKS_BENCH_DIR"/model_io_1GiB.pt
echo "perf-table: $out"
