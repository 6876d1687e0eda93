#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Installs what modhooks builds and tests with, where missing; safe to run again.
#   - Debian packages: compiler, CMake, fmt, GoogleTest, Google Benchmark, nlohmann-json,
#     libdeflate (CRC-32), ccache,
#     and Debian's libtorch 1.13 (the oldest libtorch modhooks supports; used by .ci/run), clang
#     with libFuzzer (scripts/fuzz.sh), clang-tidy (.ci/run), gloo's headers (libgloo-dev, for
#     modhooks::dist: the wheel's ProcessGroupGloo.hpp includes them but the wheel does not
#     ship them)
#   - .venv/: the pinned PyPI torch, whose libtorch is the default build target and whose Python
#     is the oracle of the differential tests, plus safetensors and numpy, torchvision and
#     transformers (models nobody here wrote, for the export tests), executorch (its Python
#     side lowers programs, its C++ runtime is what modhooks::executorch builds against), and
#     modhooks' own Python package (python/, the export side of hook points), and msprobe
#     (mindstudio-probe, the oracle of modhooks::probe) where its wheel exists
# Source it to get MODHOOKS_TORCH_PREFIX, MODHOOKS_PYTHON and the ccache settings; sourced, it
# also leaves `set -euo pipefail` on in the caller (.ci/run relies on that).
set -euo pipefail
MODHOOKS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODHOOKS_TORCH_VERSION=2.15.0
MODHOOKS_TORCHVISION_VERSION=0.29.2
MODHOOKS_TRANSFORMERS_VERSION=5.24.0
MODHOOKS_EXECUTORCH_VERSION=1.5.1
MODHOOKS_MSPROBE_VERSION=26.2.0

packages=(build-essential cmake ninja-build ccache libfmt-dev googletest libgtest-dev
  libbenchmark-dev nlohmann-json3-dev libdeflate-dev libtorch-dev python3-venv clang clang-format
  clang-tidy
  rsync libgloo-dev doxygen)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

venv="$MODHOOKS_ROOT/.venv"
if ! "$venv/bin/python" -c "import torch, safetensors, numpy; assert torch.__version__.startswith('$MODHOOKS_TORCH_VERSION')" 2>/dev/null; then
  echo "setup: installing torch==$MODHOOKS_TORCH_VERSION into .venv (a few GB, some minutes)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "torch==$MODHOOKS_TORCH_VERSION" safetensors numpy
fi
if ! "$venv/bin/python" -c "import torchvision, transformers; assert torchvision.__version__.startswith('$MODHOOKS_TORCHVISION_VERSION') and transformers.__version__ == '$MODHOOKS_TRANSFORMERS_VERSION'" 2>/dev/null; then
  echo "setup: installing torchvision and transformers into .venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "torch==$MODHOOKS_TORCH_VERSION" \
    "torchvision==$MODHOOKS_TORCHVISION_VERSION" "transformers==$MODHOOKS_TRANSFORMERS_VERSION"
fi
if ! "$venv/bin/python" -c "import executorch.version as v; assert v.__version__.startswith('$MODHOOKS_EXECUTORCH_VERSION')" 2>/dev/null; then
  echo "setup: installing executorch into .venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "torch==$MODHOOKS_TORCH_VERSION" \
    "executorch==$MODHOOKS_EXECUTORCH_VERSION"
fi
# msprobe (PyPI mindstudio-probe), the oracle of modhooks::probe's tests, with what its compare
# imports. Its 26.2.0 wheel is x86_64 only: elsewhere the tests that need it say they skipped.
if ! "$venv/bin/python" -c "import importlib.metadata as m, msprobe, pandas; assert m.version('mindstudio-probe') == '$MODHOOKS_MSPROBE_VERSION'" 2>/dev/null; then
  echo "setup: installing mindstudio-probe==$MODHOOKS_MSPROBE_VERSION into .venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "torch==$MODHOOKS_TORCH_VERSION" \
    "mindstudio-probe==$MODHOOKS_MSPROBE_VERSION" psutil matplotlib einops pytz tensorboard ||
    echo "setup: no mindstudio-probe $MODHOOKS_MSPROBE_VERSION wheel here; the msprobe comparisons will skip"
fi
# The tests import python/ from the checkout itself; the installed copy is what users get.
if ! "$venv/bin/python" -c "import modhooks, sys; sys.exit(modhooks.__version__ != '$(sed -n 's/^version = "\(.*\)"/\1/p' "$MODHOOKS_ROOT/python/pyproject.toml")')" 2>/dev/null; then
  echo "setup: installing modhooks' Python package (python/) into .venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "$MODHOOKS_ROOT/python"
fi

export MODHOOKS_PYTHON="$venv/bin/python"
MODHOOKS_TORCH_PREFIX="$("$MODHOOKS_PYTHON" -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
export MODHOOKS_TORCH_PREFIX
# ccache caches precompiled-header builds only with these.
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
export MODHOOKS_JOBS="${MODHOOKS_JOBS:-$(nproc)}"

# Configures the Release build in ${MODHOOKS_BUILD_DIR:-build} against the pinned torch; extra
# arguments go to CMake. Sets `build` to its folder.
modhooks_configure() {
  build="${MODHOOKS_BUILD_DIR:-$MODHOOKS_ROOT/build}"
  cmake -S "$MODHOOKS_ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$MODHOOKS_TORCH_PREFIX" -DMODHOOKS_PYTHON="$MODHOOKS_PYTHON" "$@" >/dev/null
}

# What every benchmark run needs: the Release build's benchmarks, one intra-op thread, and the
# files they read and write in its bench/ folder: MODHOOKS_BENCH_CHECKPOINT, the 512 MiB
# torch.save file python_state_bench.py writes for state_bench, and MODHOOKS_BENCH_DIR, where
# model_io_bench writes its 1 GiB checkpoints, aoti_bench.py the packages aoti_bench times and
# executorch_bench.py the programs executorch_bench times (exported and compiled here, a few
# minutes, where those components are built).
modhooks_bench_prepare() {
  modhooks_configure
  cmake --build "$build" -j "$MODHOOKS_JOBS" --target modhooks_benchmarks
  export OMP_NUM_THREADS=1
  export MODHOOKS_BENCH_CHECKPOINT="$build/bench/python-512MiB.pt"
  export MODHOOKS_BENCH_DIR="$build/bench"
  if [[ -x "$build/bench/aoti_bench" ]]; then
    PYTHONPATH="$MODHOOKS_ROOT/python" "$MODHOOKS_PYTHON" "$MODHOOKS_ROOT/bench/aoti_bench.py" \
      "$MODHOOKS_BENCH_DIR"
  fi
  if [[ -x "$build/bench/executorch_bench" ]]; then
    PYTHONPATH="$MODHOOKS_ROOT/python" "$MODHOOKS_PYTHON" \
      "$MODHOOKS_ROOT/bench/executorch_bench.py" "$MODHOOKS_BENCH_DIR"
  fi
}
