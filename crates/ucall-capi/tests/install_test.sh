#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install libucall into a temporary prefix (or take the tree at UCALL_PREFIX, an unpacked
# release tarball: packaging/dist_test.sh), then build examples/c/sum.c against the
# installed tree with pkg-config (shared and static) and with CMake (find_package(ucall),
# both targets), and serve one call with each binary. Checks the SONAME, its links, and
# that the shared builds record it. Also runs the examples `make examples-c` built in the
# tree. Prints "N passed, N failed".
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$root"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="${UCALL_PREFIX:-$work/prefix}"
passed=0
failed=0

# Start BINARY on a free port, call sum(1, 2) over HTTP, stop it with SIGTERM.
serve_one_call() {
    local name="$1"; shift
    local log
    log="$work/$(echo "$name" | tr -c "a-zA-Z0-9\n" _).log"
    # Created here: the server's own redirection may come after the first look at it.
    : >"$log"
    "$@" --port 0 --threads 2 >"$log" 2>&1 &
    local pid=$!
    local port=""
    for _ in $(seq 100); do
        port="$(sed -n 's/^ucall: listening on [a-z]*:\/\/[^ ]*:\([0-9]*\) .*/\1/p' "$log")"
        [ -n "$port" ] && break
        sleep 0.05
    done
    local reply=""
    if [ -n "$port" ]; then
        reply="$(curl -s --max-time 5 "http://127.0.0.1:$port/" \
            -d '{"jsonrpc":"2.0","method":"sum","params":{"a":1,"b":2},"id":1}' || true)"
    fi
    kill -TERM "$pid" 2>/dev/null || true
    local status=0
    wait "$pid" || status=$?
    if [[ "$reply" == *'"result":3'* && $status -eq 0 ]]; then
        passed=$((passed + 1))
        echo "ok: $name"
    else
        failed=$((failed + 1))
        echo "FAILED: $name: reply [$reply], exit status $status" >&2
        cat "$log" >&2
    fi
}

[ -n "${UCALL_PREFIX:-}" ] || crates/ucall-capi/packaging/install.sh "$prefix" >/dev/null
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
IFS=. read -r major minor _ <<<"$version"
if [ "$major" = 0 ]; then soname="libucall.so.0.$minor"; else soname="libucall.so.$major"; fi
for f in "lib/libucall.so.$version" lib/libucall.a include/ucall/ucall.h lib/pkgconfig/ucall.pc \
    lib/cmake/ucall/ucallConfig.cmake lib/cmake/ucall/ucallConfigVersion.cmake; do
    if [ ! -f "$prefix/$f" ] || [ -L "$prefix/$f" ]; then echo "FAILED: $f not installed as a file" >&2; exit 1; fi
done

# The SONAME (readelf -d), and the links: libucall.so -> SONAME -> libucall.so.VERSION.
check() {
    if [ "$2" = "$3" ]; then
        passed=$((passed + 1))
        echo "ok: $1"
    else
        failed=$((failed + 1))
        echo "FAILED: $1: [$2], expected [$3]" >&2
    fi
}
soname_of() { readelf -d "$1" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p'; }
needed_by() { readelf -d "$1" | sed -n 's/.*Shared library: \[\(libucall[^]]*\)\]/\1/p'; }
check "SONAME of libucall.so.$version" "$(soname_of "$prefix/lib/libucall.so.$version")" "$soname"
check "$soname links to the file" "$(readlink "$prefix/lib/$soname")" "libucall.so.$version"
check "libucall.so links to the SONAME" "$(readlink "$prefix/lib/libucall.so")" "$soname"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cc=${CC:-cc}
# shellcheck disable=SC2046
$cc -std=c99 -Wall -Wextra -Werror -O2 examples/c/sum.c $(pkg-config --cflags --libs ucall) -lpthread \
    -o "$work/sum_pkgconfig_shared"
# Static: the private libraries come from `pkg-config --static`; -Bstatic picks libucall.a.
static_libs="$(pkg-config --static --libs ucall | sed 's/-lucall/-Wl,-Bstatic -lucall -Wl,-Bdynamic/')"
# shellcheck disable=SC2046,SC2086
$cc -std=c99 -Wall -Wextra -Werror -O2 examples/c/sum.c $(pkg-config --cflags ucall) $static_libs \
    -o "$work/sum_pkgconfig_static"
check "pkg-config, shared: records the SONAME" "$(needed_by "$work/sum_pkgconfig_shared")" "$soname"
# No LD_LIBRARY_PATH: ucall.pc's rpath finds the library where the tree is.
serve_one_call "pkg-config, shared" "$work/sum_pkgconfig_shared"
serve_one_call "pkg-config, static" "$work/sum_pkgconfig_static"
if ldd "$work/sum_pkgconfig_static" | grep -q libucall; then
    echo "FAILED: the static build links libucall.so" >&2
    failed=$((failed + 1))
fi

mkdir -p "$work/cmake"
cat >"$work/cmake/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.16)
project(ucall_sum C CXX)
find_package(ucall $major.$minor REQUIRED)
add_executable(sum_shared "$root/examples/c/sum.c")
set_target_properties(sum_shared PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON)
target_link_libraries(sum_shared PRIVATE ucall::ucall Threads::Threads)
add_executable(sum_static "$root/examples/c/sum.c")
set_target_properties(sum_static PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON)
target_link_libraries(sum_static PRIVATE ucall::ucall_static)
add_executable(sum_cpp "$root/examples/c/sum.cpp")
set_target_properties(sum_cpp PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
target_link_libraries(sum_cpp PRIVATE ucall::ucall_static)
CMAKE
cmake -S "$work/cmake" -B "$work/cmake/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/cmake/build" -j 2 >/dev/null
check "CMake, ucall::ucall: records the SONAME" "$(needed_by "$work/cmake/build/sum_shared")" "$soname"
serve_one_call "CMake, ucall::ucall" "$work/cmake/build/sum_shared"
serve_one_call "CMake, ucall::ucall_static" "$work/cmake/build/sum_static"
serve_one_call "CMake, C++ example" "$work/cmake/build/sum_cpp"

for example in target/c/examples/sum target/c/examples/sum_cpp; do
    if [ -x "$example" ]; then
        serve_one_call "make examples-c: $example" "$example"
    fi
done

echo "install test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
