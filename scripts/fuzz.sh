#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds the libFuzzer targets of fuzz/ with clang, ASan and UBSan in build-fuzz, writes their
# seed corpora (Python torch's and safetensors' files, and modhooks' own) and runs each target
# for RUNS executions, one after another, printing how many each ran.
#
#   bash scripts/fuzz.sh [RUNS [TARGET...]]       RUNS defaults to 1000000, TARGET to all five
#
# MODHOOKS_FUZZ_SECONDS, when set, also bounds each target's time (libFuzzer's -max_total_time).
# A crash, leak, sanitizer report or broken invariant stops the run with a non-zero exit; the
# input is saved under build-fuzz/findings/<target>/. New coverage is kept in
# build-fuzz/corpus/<target> for the next run. The inputs under tests/data/fuzz/<target> (earlier
# findings) run first, every time.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
runs="${1:-1000000}"
shift || true
targets=("$@")
((${#targets[@]})) || targets=(fuzz_torch_save fuzz_unpickler fuzz_load_object fuzz_safetensors fuzz_load_state_dict)
build="$root/build-fuzz"

# The library as unity units of 16 sources: about a third of its compile time.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_PREFIX_PATH="$MODHOOKS_TORCH_PREFIX" -DMODHOOKS_BUILD_FUZZERS=ON -DMODHOOKS_WERROR=ON \
  -DMODHOOKS_BUILD_TESTS=OFF -DMODHOOKS_BUILD_EXAMPLES=OFF -DMODHOOKS_BUILD_BENCH=OFF \
  -DMODHOOKS_INSTALL=OFF >/dev/null
cmake --build "$build" -j "$MODHOOKS_JOBS" --target "${targets[@]}" make_seeds

# No LSan suppressions: libFuzzer checks for leaks per input, where libtorch's once-per-process
# allocations do not show, and .ci/lsan.supp's libtorch_cpu.so entry would hide the miniz state
# that libtorch's zip reader leaks when its constructor throws on a file modhooks let through.
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
seeds="$build/seeds"
rm -rf "$seeds"
"$MODHOOKS_PYTHON" "$root/fuzz/make_corpus.py" "$seeds"
ASAN_OPTIONS=detect_leaks=0 "$build/fuzz/make_seeds" "$seeds"
cat "$root/fuzz/zip.dict" "$root/fuzz/pickle.dict" >"$build/torch_save.dict"

status=0
summary=()
for target in "${targets[@]}"; do
  name="${target#fuzz_}"
  case "$name" in
    torch_save) dict=(-dict="$build/torch_save.dict") ;;
    unpickler | load_object) dict=(-dict="$root/fuzz/pickle.dict") ;;
    safetensors) dict=(-dict="$root/fuzz/safetensors.dict") ;;
    *) dict=() ;;
  esac
  corpus="$build/corpus/$name"
  findings="$build/findings/$name"
  mkdir -p "$corpus" "$findings" "$seeds/$name"
  dirs=("$corpus" "$seeds/$name")
  [[ -d "$root/tests/data/fuzz/$name" ]] && dirs+=("$root/tests/data/fuzz/$name")
  log="$build/$name.log"
  printf '\n== %s: %s runs\n' "$target" "$runs"
  if "$build/fuzz/$target" -runs="$runs" ${MODHOOKS_FUZZ_SECONDS:+-max_total_time=$MODHOOKS_FUZZ_SECONDS} \
    "${dict[@]}" -artifact_prefix="$findings/" -print_final_stats=1 "${dirs[@]}" >"$log" 2>&1; then
    result="ok"
  else
    result="FAILED (input saved in $findings/, log in $log)"
    status=1
    tail -n 40 "$log"
  fi
  executed=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  summary+=("$(printf '%-22s %10s executions  %s' "$target" "${executed:-?}" "$result")")
done
printf '\n== executions per target\n'
printf '%s\n' "${summary[@]}"
exit "$status"
