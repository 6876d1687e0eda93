#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The device check: on a GPU machine with Python torch (CUDA), nvcc, CMake and ninja, and the
# folder scripts/device-pack.sh made (default .device-pack in the checkout), builds modhooks and
# only the tests that need a GPU against that Python's torch package folder, runs their CUDA
# cases in order of value, and writes a short report (docs/device.md says what each line means):
#   bash scripts/device-check.sh [REPORT_DIR]     (default: $OUT, else build-device/report)
# REPORT_DIR gets report.txt, build.log (configure and build) and tests.log (the tests' output).
# Without a GPU the same steps run and the CUDA cases report as skipped. Exit status 0 when
# nothing failed (on a machine where torch sees CUDA, a skipped case is a failure).
# Settings from the environment: MODHOOKS_PYTHON (default python3), MODHOOKS_DEVICE_PACK,
# MODHOOKS_DEVICE_BUILD (default build-device), MODHOOKS_JOBS (default nproc),
# MODHOOKS_DEVICE_LIMIT (seconds for the whole check, default 480), MODHOOKS_DEVICE_CMAKE_ARGS
# (extra CMake arguments, split on spaces, e.g. -DMODHOOKS_WERROR=ON).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
report_dir="${1:-${OUT:-$root/build-device/report}}"
pack="${MODHOOKS_DEVICE_PACK:-$root/.device-pack}"
build="${MODHOOKS_DEVICE_BUILD:-$root/build-device}"
python="${MODHOOKS_PYTHON:-python3}"
jobs="${MODHOOKS_JOBS:-$(nproc)}"
limit="${MODHOOKS_DEVICE_LIMIT:-480}"
read -r -a extra_args <<<"${MODHOOKS_DEVICE_CMAKE_ARGS:-}"

mkdir -p "$report_dir" "$build"
report="$report_dir/report.txt"
build_log="$report_dir/build.log"
tests_log="$report_dir/tests.log"
: >"$report" && : >"$build_log" && : >"$tests_log"
failures=0
start=$SECONDS

say() { printf '%s\n' "$*" | tee -a "$report"; }
# What is left of the whole check's limit, in seconds, at least 1.
left() { local n=$((limit - (SECONDS - start))); echo $((n > 0 ? n : 1)); }
finish() {
  local verdict=passed
  ((failures == 0)) || verdict="FAILED ($failures)"
  say "result     $verdict in $((SECONDS - start)) s"
  exit $((failures == 0 ? 0 : 1))
}

say "modhooks device check $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), $jobs jobs"

# The machine: torch and whether it sees a GPU.
if ! env_line="$("$python" - 2>&1 <<'EOF'
import os, torch
cuda = torch.cuda.is_available()
gpu = torch.cuda.get_device_name(0) if cuda else "none"
print(f"{torch.__version__}|{os.path.dirname(torch.__file__)}|{int(cuda)}|{gpu}|{torch.version.cuda}")
EOF
)"; then
  say "machine    FAILED: $python cannot import torch: ${env_line##*$'\n'}"
  failures=1 && finish
fi
IFS='|' read -r torch_version torch_prefix cuda gpu torch_cuda <<<"$env_line"
nvcc_version="none"
if command -v nvcc >/dev/null; then nvcc_version="$(nvcc --version | sed -n 's/.*release \([^,]*\).*/\1/p')"; fi
say "machine    torch $torch_version (CUDA ${torch_cuda}) at $torch_prefix; GPU: $gpu; nvcc $nvcc_version"
if [[ ! -d "$pack/usr" ]]; then
  say "pack       FAILED: no $pack/usr (make it here with scripts/device-pack.sh; with the device tool, name .device-pack in carry)"
  failures=1 && finish
fi

# pkg-config from the pack, its library beside it; the pack's .pc files first.
triplet_lib="$pack/usr/lib/x86_64-linux-gnu"
mkdir -p "$build/tools"
cat >"$build/tools/pkg-config" <<EOF
#!/bin/sh
LD_LIBRARY_PATH="$triplet_lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$pack/usr/bin/pkgconf" "\$@"
EOF
chmod +x "$build/tools/pkg-config"
export PKG_CONFIG_PATH="$triplet_lib/pkgconfig:$pack/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"

# NCCL's header from the wheel's nvidia packages, where there is one.
nccl_args=()
nccl_h="$(find "$torch_prefix/../nvidia" -path '*/include/nccl.h' 2>/dev/null | head -n 1 || true)"
if [[ -n "$nccl_h" ]]; then nccl_args=(-DMODHOOKS_NCCL_INCLUDE_DIR="$(dirname "$nccl_h")"); fi

t=$SECONDS
configure=(cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_PREFIX_PATH="$torch_prefix;$pack/usr" -DPKG_CONFIG_EXECUTABLE="$build/tools/pkg-config"
  -DMODHOOKS_PYTHON="$(command -v "$python")" -DMODHOOKS_BUILD_EXAMPLES=OFF
  -DMODHOOKS_BUILD_BENCH=OFF -DMODHOOKS_TEST_CONSUMERS=OFF -DMODHOOKS_INSTALL=OFF
  -DMODHOOKS_TEST_PER_CASE=OFF "${nccl_args[@]}" "${extra_args[@]}")
if ! timeout "$(left)" "${configure[@]}" >>"$build_log" 2>&1; then
  say "configure  FAILED in $((SECONDS - t)) s: $(grep -m 1 -A 2 'CMake Error' "$build_log" | tr '\n' ' ' | cut -c1-300)"
  failures=1 && finish
fi
dist_line="$(grep -m 1 'modhooks::dist' "$build_log" | sed 's/^-- //' || true)"
say "configure  ok in $((SECONDS - t)) s; ${dist_line:-modhooks::dist: not configured}"

# Everything the configure found should come from the pack (it is first on the paths).
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
outside=()
for var in fmt_DIR GTest_DIR nlohmann_json_DIR MODHOOKS_GLOO_INCLUDE_DIR pkgcfg_lib_LIBDEFLATE_deflate; do
  value="$(cache_value "$var")"
  [[ "$value" == "$pack"/* ]] || outside+=("$var=${value:-(not found)}")
done
if ((${#outside[@]})); then
  say "pack       FAILED: found outside $pack: ${outside[*]}"
  failures=$((failures + 1))
else
  say "pack       ok: fmt, GoogleTest, nlohmann-json, gloo's headers, libdeflate from $pack ($(du -sh "$pack" | cut -f1))"
fi
if ((cuda)) && [[ "$dist_line" != *"NCCL 1"* ]]; then
  say "nccl       FAILED: torch sees CUDA but modhooks::dist has no NCCL (nccl.h: ${nccl_h:-not found})"
  failures=$((failures + 1))
fi

targets=(grad_test model_io_test nn_utils_threads_test)
[[ "$dist_line" == *Gloo* ]] && targets+=(ddp_device_test fsdp_test)
aoti_line="$(grep -m 1 'modhooks::aoti' "$build_log" | sed 's/^-- //' || true)"
[[ "$aoti_line" == *": on"* ]] && targets+=(aoti_test)
t=$SECONDS
rc=0
timeout "$(left)" cmake --build "$build" -j "$jobs" --target "${targets[@]}" >>"$build_log" 2>&1 || rc=$?
if ((rc == 124)); then
  say "build      FAILED: stopped at the check's limit of $limit s, after $((SECONDS - t)) s"
  failures=$((failures + 1)) && finish
elif ((rc != 0)); then
  say "build      FAILED in $((SECONDS - t)) s: $(grep -m 1 -E 'error:|Error|Killed' "$build_log" | cut -c1-300)"
  failures=$((failures + 1)) && finish
fi
say "build      ok in $((SECONDS - t)) s: modhooks ${targets[*]}"

# One step: a test executable with a GoogleTest filter, its cases read from its XML report.
step() {
  local name="$1" exe="$2" filter="$3" xml="$build/device-xml/$1.xml" rc=0 t=$SECONDS
  mkdir -p "$build/device-xml" && rm -f "$xml"
  if [[ ! -x "$build/$exe" ]]; then
    say "$(printf '%-10s' "$name") FAILED: $exe was not built"
    failures=$((failures + 1)) && return
  fi
  printf '\n===== %s: %s --gtest_filter=%s\n' "$name" "$exe" "$filter" >>"$tests_log"
  timeout "$(left)" "$build/$exe" --gtest_filter="$filter" --gtest_output="xml:$xml" \
    >>"$tests_log" 2>&1 || rc=$?
  local summary
  summary="$("$python" - "$xml" "$rc" "$cuda" "$((SECONDS - t))" "$name" 2>>"$tests_log" <<'EOF'
import os, sys
import xml.etree.ElementTree as ET
path, rc, cuda, seconds, name = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4], sys.argv[5]
head = f"{name:<10}"
if not os.path.exists(path):
    why = "timed out" if rc in (124, 137) else f"exit status {rc}, no test report (crashed?)"
    print(f"{head} FAILED in {seconds} s: {why}; see tests.log")
    print("!1")
    sys.exit()
counts = {"passed": 0, "failed": 0, "skipped": 0}
lines = []
for case in ET.parse(path).iter("testcase"):
    full = f"{case.get('classname')}.{case.get('name')}"
    took = f"{float(case.get('time', 0)):.2f} s"
    failure = case.find("failure")
    skipped = case.find("skipped")
    if failure is not None:
        counts["failed"] += 1
        message = (failure.get("message") or "").strip().replace("\n", " ")[:240]
        lines.append(f"  FAILED   {full} ({took}): {message}")
    elif skipped is not None or case.get("result") == "skipped":
        counts["skipped"] += 1
        message = ((skipped.get("message") if skipped is not None else "") or "").strip()
        message = message.splitlines()[-1] if message else ""
        lines.append(f"  skipped  {full}: {message}")
    else:
        counts["passed"] += 1
        lines.append(f"  passed   {full} ({took})")
run = sum(counts.values())
bad = counts["failed"] + (counts["skipped"] if cuda else 0) + (1 if rc != 0 and not counts["failed"] else 0)
if run == 0:
    status, bad = "FAILED (no case matched)", 1
elif counts["failed"] or (rc != 0):
    status = "FAILED"
elif counts["skipped"] == run:
    status = "FAILED (skipped on a CUDA machine)" if cuda else "skipped"
elif counts["skipped"]:
    status = "FAILED (some skipped on a CUDA machine)" if cuda else "ok, some skipped"
else:
    status = "ok"
print(f"{head} {status} in {seconds} s: {run} run, {counts['passed']} passed, "
      f"{counts['failed']} failed, {counts['skipped']} skipped" + (f", exit status {rc}" if rc else ""))
print("\n".join(lines))
print(f"!{bad}")
EOF
)" || summary="$(printf '%-10s' "$name") FAILED: its test report could not be read; see tests.log"$'\n!1'
  say "${summary%$'\n'!*}"
  failures=$((failures + ${summary##*!}))
}

# In order of value: the gradient hooks on CUDA tensors; load_model into a CUDA model through
# the pinned staging buffer, its peak extra device memory at most the largest tensor; a CPU
# checkpoint into a CUDA model with load_state_dict; DDP and fully_shard at world size 1 over NCCL
# beside Gloo.
step grad tests/grad_test 'Devices/Grad.*/cuda:Backend.CpuAndCudaUseAten'
step load_model tests/model_io_test \
  'ModelIo.CudaTargetsGoThroughThePinnedBufferInChunks:ModelIo.CudaLoadHoldsAtMostTheLargestTensorOnTheDevice'
step load_sd tests/model_io_test 'ModelIo.CpuCheckpointIntoACudaModelWithLoadStateDict'
step cached tests/nn_utils_threads_test 'NnUtilsThreads.ACachedValueComputedOnOneStreamIsReadOnAnother'
if [[ " ${targets[*]} " == *" ddp_device_test "* ]]; then
  step ddp tests/dist/ddp_device_test 'Backends/DdpWorldOfOne.*'
  step fsdp tests/dist/fsdp_test 'Backends/FsdpWorldOfOne.*'
else
  say "ddp        FAILED: modhooks::dist is not configured ($dist_line)"
  failures=$((failures + 1))
fi
# A package compiled for CUDA on this machine by its own Python (export with hook points, then
# AOTInductor), whose hooks fire on device tensors, against eager's hooks on the same device.
if [[ " ${targets[*]} " == *" aoti_test "* ]]; then
  t=$SECONDS
  export MODHOOKS_AOTI_PACKAGES="$build/aoti-cuda"
  if timeout "$(left)" env PYTHONPATH="$root/python" "$python" "$root/tests/python/aoti_packages.py" \
    "$MODHOOKS_AOTI_PACKAGES" --cuda >>"$tests_log" 2>&1; then
    ((cuda)) && say "aoti-pkg   ok in $((SECONDS - t)) s: branchy_cuda.pt2 compiled for CUDA"
  else
    say "aoti-pkg   FAILED in $((SECONDS - t)) s: Python could not export or compile; see tests.log"
    failures=$((failures + 1))
  fi
  step aoti tests/aoti_test 'AotiCuda.*'
else
  say "aoti       FAILED: modhooks::aoti is not configured (${aoti_line:-no line})"
  failures=$((failures + 1))
fi
finish
