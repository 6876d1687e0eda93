#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds the API reference: Doxygen (docs/Doxyfile) over the public headers in include/modhooks
# and the group pages in docs/reference, into build-docs/html (or $MODHOOKS_DOCS_DIR/html).
# Any Doxygen warning (an undocumented public member, a broken \ref or command) fails it after
# the whole run, with every warning printed. Installs Debian's doxygen where missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${MODHOOKS_DOCS_DIR:-build-docs}"

if ! command -v doxygen >/dev/null; then
  echo "docs: installing doxygen"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq doxygen >/dev/null
fi

rm -rf "$out"  # pages of symbols that are gone would otherwise stay
start=$SECONDS
if ! { cat docs/Doxyfile; echo "OUTPUT_DIRECTORY = $out"; } | doxygen -; then
  echo "docs: doxygen reported the warnings above (warnings are errors)" >&2
  exit 1
fi
echo "docs: API reference in $out/html/index.html ($((SECONDS - start)) s, doxygen $(doxygen --version))"
