#!/usr/bin/env bash
# Installs the built library, headers, pkg-config file and CMake package (called by `make install`).
#
#   scripts/install.sh PREFIX [LIBDIR] [INCLUDEDIR]      (DESTDIR is honoured, as usual)
#
# Lays out, under LIBDIR (default PREFIX/lib):
#   libtidewire.so.M.m            the library (SONAME libtidewire.so.M)
#   libtidewire.so.M -> .so.M.m   what programs load
#   libtidewire.so -> .so.M       what the linker finds with -ltidewire
#   libtransfer_engine.so -> .so.M  Mooncake's name, for programs built against Mooncake's C API
#   libtidewire.a                 the static archive
#   pkgconfig/tidewire.pc, cmake/tidewire/tidewireConfig{,Version}.cmake
# and tidewire.h plus transfer_engine_c.h under INCLUDEDIR (default PREFIX/include).
set -euo pipefail

die() { echo "install: error: $*" >&2; exit 1; }
[ $# -ge 1 ] && [ -n "$1" ] || die "usage: $0 PREFIX [LIBDIR] [INCLUDEDIR]"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$(realpath -m "$1")"
libdir="$(realpath -m "${2:-$prefix/lib}")"
includedir="$(realpath -m "${3:-$prefix/include}")"
destdir="${DESTDIR:-}"

version="$(sed -n 's/^version *= *"\([0-9][0-9.]*\)".*/\1/p' "$root/Cargo.toml" | head -n 1)"
[ -n "$version" ] || die "cannot read the version from Cargo.toml"
major="${version%%.*}"
minor="$(echo "$version" | cut -d. -f2)"
full="$major.$minor"

so="$root/target/release/libtidewire.so"
archive="$root/target/release/libtidewire.a"
[ -f "$so" ] && [ -f "$archive" ] || die "build first (make build): $so or $archive is missing"
readelf -d "$so" | grep -q "SONAME.*libtidewire.so.$major\]" \
    || die "$so has no SONAME libtidewire.so.$major (stale build? run make build)"

cmakedir="$libdir/cmake/tidewire"
install -d "$destdir$libdir/pkgconfig" "$destdir$cmakedir" "$destdir$includedir"
install -m 0755 "$so" "$destdir$libdir/libtidewire.so.$full"
install -m 0644 "$archive" "$destdir$libdir/libtidewire.a"
ln -sfn "libtidewire.so.$full" "$destdir$libdir/libtidewire.so.$major"
ln -sfn "libtidewire.so.$major" "$destdir$libdir/libtidewire.so"
ln -sfn "libtidewire.so.$major" "$destdir$libdir/libtransfer_engine.so"
install -m 0644 "$root/include/tidewire.h" "$root/include/transfer_engine_c.h" "$destdir$includedir/"

subst() {
    sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" -e "s|@INCLUDEDIR@|$includedir|g" \
        -e "s|@VERSION@|$version|g" -e "s|@SOVERSION_MAJOR@|$major|g" -e "s|@SOVERSION_FULL@|$full|g" \
        -e "s|@CMAKE_TO_PREFIX@|$(realpath -m --relative-to="$cmakedir" "$prefix")|g" \
        -e "s|@LIBDIR_REL@|$(realpath -m --relative-to="$prefix" "$libdir")|g" \
        -e "s|@INCLUDEDIR_REL@|$(realpath -m --relative-to="$prefix" "$includedir")|g" "$1"
}
subst "$root/packaging/tidewire.pc.in" > "$destdir$libdir/pkgconfig/tidewire.pc"
subst "$root/packaging/tidewireConfig.cmake.in" > "$destdir$cmakedir/tidewireConfig.cmake"
subst "$root/packaging/tidewireConfigVersion.cmake.in" > "$destdir$cmakedir/tidewireConfigVersion.cmake"
echo "installed tidewire $version into $destdir$prefix (lib: $libdir, include: $includedir)"
