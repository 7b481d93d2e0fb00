#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install libucall under PREFIX: lib/libucall.{so,a}, include/ucall/ucall.h,
# lib/pkgconfig/ucall.pc, lib/cmake/ucall/ucallConfig{,Version}.cmake.
#   crates/ucall-capi/packaging/install.sh PREFIX [TARGET_DIR]   (`make install PREFIX=...`)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
prefix="${1:?usage: install.sh PREFIX [TARGET_DIR]}"
target="${2:-$root/target/release}"
here="$root/crates/ucall-capi/packaging"

version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
# What a program linking libucall.a needs besides it (rustc --print native-static-libs).
private_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
cmake_private_libs="dl;m;rt;util"

for lib in libucall.so libucall.a; do
    [ -f "$target/$lib" ] || { echo "install: $target/$lib is missing: cargo build --release -p ucall-capi" >&2; exit 1; }
done
mkdir -p "$prefix"
prefix="$(cd "$prefix" && pwd)"
install -d "$prefix/lib/pkgconfig" "$prefix/lib/cmake/ucall" "$prefix/include/ucall"
install -m 755 "$target/libucall.so" "$prefix/lib/libucall.so"
install -m 644 "$target/libucall.a" "$prefix/lib/libucall.a"
install -m 644 "$root/include/ucall/ucall.h" "$prefix/include/ucall/ucall.h"
fill() {
    sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" \
        -e "s|@PRIVATE_LIBS@|$private_libs|g" -e "s|@CMAKE_PRIVATE_LIBS@|$cmake_private_libs|g" "$1" >"$2"
    chmod 644 "$2"
}
fill "$here/ucall.pc.in" "$prefix/lib/pkgconfig/ucall.pc"
fill "$here/ucallConfig.cmake.in" "$prefix/lib/cmake/ucall/ucallConfig.cmake"
fill "$here/ucallConfigVersion.cmake.in" "$prefix/lib/cmake/ucall/ucallConfigVersion.cmake"
echo "install: libucall $version under $prefix"
