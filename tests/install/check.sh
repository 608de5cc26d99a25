#!/usr/bin/env bash
# `make install` into a temporary prefix, then build and run programs against the installed tree
# only (never the source tree's include/ or target/): a C example through pkg-config, the
# Mooncake ABI test through the libtransfer_engine.so alias, and a CMake project that uses
# find_package(tidewire) for a C++ example (shared) and a C example (static).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
fail() { echo "install check FAILED: $*" >&2; exit 1; }
step() { echo "== install check: $*"; }

make -s -C "$root" install PREFIX="$prefix" >/dev/null
lib="$prefix/lib"

step "layout and SONAME"
version="$(sed -n 's/^version *= *"\([0-9][0-9.]*\)".*/\1/p' "$root/Cargo.toml" | head -n 1)"
major="${version%%.*}"; full="$major.$(echo "$version" | cut -d. -f2)"
[ -f "$lib/libtidewire.so.$full" ] && [ ! -L "$lib/libtidewire.so.$full" ] || fail "libtidewire.so.$full missing"
[ "$(readlink "$lib/libtidewire.so.$major")" = "libtidewire.so.$full" ] || fail "libtidewire.so.$major link"
[ "$(readlink "$lib/libtidewire.so")" = "libtidewire.so.$major" ] || fail "libtidewire.so link"
[ "$(readlink "$lib/libtransfer_engine.so")" = "libtidewire.so.$major" ] || fail "libtransfer_engine.so link"
readelf -d "$lib/libtidewire.so.$full" | grep -q "SONAME.*\[libtidewire.so.$major\]" || fail "SONAME"
for h in tidewire.h transfer_engine_c.h; do
    cmp -s "$root/include/$h" "$prefix/include/$h" || fail "header $h"
done

step "pkg-config: C example, shared"
export PKG_CONFIG_PATH="$lib/pkgconfig"
[ "$(pkg-config --modversion tidewire)" = "$version" ] || fail "pkg-config --modversion"
cd "$work"   # nothing from the source tree is on any search path from here on
# shellcheck disable=SC2046  # word splitting of pkg-config's output is intended
gcc -std=c11 -Wall -Wextra -Werror "$root/examples/c/loopback.c" -o loopback_pc \
    $(pkg-config --cflags --libs tidewire) -Wl,-rpath,"$lib"
readelf -d loopback_pc | grep -q "NEEDED.*\[libtidewire.so.$major\]" || fail "loopback_pc does not need the SONAME"
timeout 60 ./loopback_pc

step "Mooncake name: the ABI test linked with -ltransfer_engine"
gcc -std=c11 -Wall -Wextra -Werror "$root/c_tests/test_mooncake_abi.c" -o mooncake_abi \
    $(pkg-config --cflags tidewire) -L"$lib" -ltransfer_engine -Wl,-rpath,"$lib"
timeout 120 ./mooncake_abi >/dev/null

step "CMake find_package: C++ example (shared) and C example (static)"
cmake -S "$root/tests/install/consumer" -B build -DCMAKE_PREFIX_PATH="$prefix" \
    -DEXAMPLES_DIR="$root/examples" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 >/dev/null
readelf -d build/loopback_cpp | grep -q "NEEDED.*\[libtidewire.so.$major\]" || fail "loopback_cpp is not linked to the SONAME"
readelf -d build/loopback_c_static | grep -q "NEEDED.*libtidewire" && fail "static build still needs the shared library"
timeout 60 build/loopback_cpp
timeout 60 build/loopback_c_static
echo "install check: passed (prefix layout, pkg-config, CMake shared and static)"
