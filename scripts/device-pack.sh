#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Packs what scripts/device-check.sh needs on a GPU machine that has torch, CUDA, CMake and ninja
# but none of the Debian packages modhooks builds with, and no network:
#   bash scripts/device-pack.sh [FOLDER]        (default: .device-pack in the checkout, ignored)
# Downloads Debian's packages with `apt-get download` (into a temporary folder; nothing is
# installed) and unpacks each with `dpkg -x` into FOLDER, never into /. FOLDER then holds a
# private prefix, FOLDER/usr, that device-check.sh puts first on CMake's and pkg-config's paths,
# and FOLDER/PACKAGES, the packages and versions in it. Run on Debian 12 (this project's build
# machines); the result is a few MiB and moves with the checkout (the device tool's `carry`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pack="${1:-$root/.device-pack}"

# What the CMake of the library, the tests and modhooks::dist finds (CMakeLists.txt,
# tests/CMakeLists.txt), beside torch:
#   fmt (find_package(fmt); fmt's CMake config names libfmt.so.9, which must exist: libfmt9),
#   GoogleTest (find_package(GTest): libgtest-dev's static libraries and config),
#   nlohmann-json (find_package(nlohmann_json 3)),
#   libdeflate (pkg_check_modules: its .pc file, headers and libdeflate.so.0 from libdeflate0),
#   gloo's headers (find_path gloo/algorithm.h; the wheel's ProcessGroupGloo.hpp includes them),
#   pkg-config itself (find_package(PkgConfig)): pkgconf-bin and its libpkgconf3.
packages=(libfmt-dev libfmt9 libgtest-dev nlohmann-json3-dev libdeflate-dev libdeflate0
  libgloo-dev pkgconf-bin libpkgconf3)

if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
  echo "device-pack: needs apt-get and dpkg (Debian 12)" >&2
  exit 1
fi
if ! apt-cache show "${packages[@]}" >/dev/null 2>&1; then
  echo "device-pack: apt's package lists lack some of ${packages[*]}: apt-get update" >&2
  apt-get update -qq
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# apt downloads as its own user where it can write the folder.
if ((EUID == 0)) && id _apt >/dev/null 2>&1; then chown _apt "$work"; fi
(cd "$work" && apt-get download -qq "${packages[@]}")

rm -rf "$pack"
mkdir -p "$pack"
: >"$pack/PACKAGES"
for deb in "$work"/*.deb; do
  dpkg -x "$deb" "$pack"
  # shellcheck disable=SC2016 # dpkg-deb's fields, not the shell's
  dpkg-deb -W --showformat='${Package} ${Version}\n' "$deb" >>"$pack/PACKAGES"
done
# Documentation is not needed to build.
rm -rf "$pack/usr/share/doc" "$pack/usr/share/man" "$pack/usr/share/lintian"

# The .pc files name /usr; make them relative to where they lie (${pcfiledir}, which pkgconf
# and pkg-config expand), so the folder works wherever it is unpacked: every /usr becomes
# ${prefix}, defined first as the pack's usr. A .pc under lib/<triplet>/pkgconfig has its
# libraries in lib/<triplet> (libdeflate.pc says /usr/lib).
while IFS= read -r -d '' pc; do
  dir="$(dirname "$pc")"
  up="$(realpath --relative-to="$dir" "$pack/usr")"
  # shellcheck disable=SC2016 # pkg-config's variable, not the shell's
  sed -i -e '/^prefix=/d' -e 's|/usr/|${prefix}/|g; s|=/usr$|=${prefix}|' "$pc"
  sed -i "1i prefix=\${pcfiledir}/$up" "$pc"
  case "$dir" in
    */lib/*/pkgconfig) sed -i "s|^libdir=.*|libdir=\${pcfiledir}/..|" "$pc" ;;
  esac
done < <(find "$pack/usr" -name '*.pc' -print0)

echo "device-pack: $(wc -l <"$pack/PACKAGES") packages in $pack ($(du -sh "$pack" | cut -f1))"
