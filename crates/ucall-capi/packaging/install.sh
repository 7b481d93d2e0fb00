#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install libucall under PREFIX: lib/libucall.so.VERSION with the symlinks
# lib/libucall.so.ABI (its SONAME) and lib/libucall.so (for -lucall), lib/libucall.a,
# include/ucall/ucall.h, lib/pkgconfig/ucall.pc, lib/cmake/ucall/ucallConfig{,Version}.cmake.
#   crates/ucall-capi/packaging/install.sh PREFIX [TARGET_DIR]   (`make install PREFIX=...`)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
prefix="${1:?usage: install.sh PREFIX [TARGET_DIR]}"
target="${2:-$root/target/release}"
here="$root/crates/ucall-capi/packaging"

version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
# The SONAME's version, as crates/ucall-capi/build.rs sets it: MAJOR, or 0.MINOR before 1.0.
IFS=. read -r major minor _ <<<"$version"
if [ "$major" = 0 ]; then abi="0.$minor"; else abi="$major"; fi
# What a program linking libucall.a needs besides it (rustc --print native-static-libs).
private_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
cmake_private_libs="dl;m;rt;util"

for lib in libucall.so libucall.a; do
    [ -f "$target/$lib" ] || { echo "install: $target/$lib is missing: cargo build --release -p ucall-capi" >&2; exit 1; }
done
mkdir -p "$prefix"
prefix="$(cd "$prefix" && pwd)"
install -d "$prefix/lib/pkgconfig" "$prefix/lib/cmake/ucall" "$prefix/include/ucall"
if command -v readelf >/dev/null; then
    soname="$(readelf -d "$target/libucall.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
    [ "$soname" = "libucall.so.$abi" ] || {
        echo "install: $target/libucall.so has SONAME [$soname], expected libucall.so.$abi: rebuild it" >&2
        exit 1
    }
fi
# The versioned file, then the links to it: the SONAME's (what programs load) and the
# unversioned one (what -lucall finds at link time).
install -m 755 "$target/libucall.so" "$prefix/lib/libucall.so.$version"
ln -sfn "libucall.so.$version" "$prefix/lib/libucall.so.$abi"
ln -sfn "libucall.so.$abi" "$prefix/lib/libucall.so"
install -m 644 "$target/libucall.a" "$prefix/lib/libucall.a"
install -m 644 "$root/include/ucall/ucall.h" "$prefix/include/ucall/ucall.h"
fill() {
    sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" \
        -e "s|@PRIVATE_LIBS@|$private_libs|g" -e "s|@CMAKE_PRIVATE_LIBS@|$cmake_private_libs|g" \
        -e "s|@ABI@|$abi|g" "$1" >"$2"
    chmod 644 "$2"
}
fill "$here/ucall.pc.in" "$prefix/lib/pkgconfig/ucall.pc"
fill "$here/ucallConfig.cmake.in" "$prefix/lib/cmake/ucall/ucallConfig.cmake"
fill "$here/ucallConfigVersion.cmake.in" "$prefix/lib/cmake/ucall/ucallConfigVersion.cmake"
echo "install: libucall $version under $prefix"
