#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Fetches CANN's ACL headers as shipped in the torch-npu wheel on PyPI, without installing it or
# any dependency, and prints the include dir to pass as -DMODHOOKS_ACL_HEADERS_DIR=... so the
# acl_signature_check target can compare modhooks' ACL prototypes with the real ones.
#
#   scripts/fetch-acl-headers.sh [cache-dir]
#
# Environment: PYTHON (default python3), TORCH_NPU_VERSION (default below: the newest torch-npu
# with a cp311 manylinux x86_64 wheel when this was written; it pairs with torch 2.6).
set -euo pipefail

version="${TORCH_NPU_VERSION:-2.6.0.post5}"
cache="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/modhooks/torch-npu-${version}}"
python="${PYTHON:-python3}"
include="$cache/torch_npu/include/third_party/acl/inc"

if [[ ! -f "$include/acl/acl.h" ]]; then
  mkdir -p "$cache"
  # --platform/--python-version make pip fetch the wheel for that target whatever this host is;
  # --no-deps keeps torch and friends out.
  "$python" -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.11 --platform manylinux2014_x86_64 \
    --dest "$cache" "torch-npu==${version}" >&2
  wheel=$(ls "$cache"/torch_npu-"${version}"-*.whl | head -n1)
  "$python" - "$wheel" "$cache" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.startswith("torch_npu/include/third_party/acl/")]
    z.extractall(dest, members)
PY
  rm -f "$wheel"
fi
test -f "$include/acl/acl.h" || { echo "no acl/acl.h in the torch-npu ${version} wheel" >&2; exit 1; }
echo "$include"
