#!/usr/bin/env sh
# Installs the C library for C/C++ consumers: header, shared and static libraries, pkg-config file.
#   bindings/c/install.sh PREFIX [PROFILE]     (PROFILE: release (default) or debug)
# Build first: cargo build --release. Then: cc app.c $(pkg-config --cflags --libs brevis)
# with PKG_CONFIG_PATH=PREFIX/lib/pkgconfig when PREFIX is not a system prefix.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
prefix=${1:?usage: install.sh PREFIX [PROFILE]}
profile=${2:-release}
lib="${BREVIS_LIB_DIR:-$root/target/$profile}"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
mkdir -p "$prefix/include" "$prefix/lib/pkgconfig"
cp "$root/include/brevis.h" "$prefix/include/brevis.h"
cp "$lib/libbrevis.so" "$lib/libbrevis.a" "$prefix/lib/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" "$root/brevis.pc.in" > "$prefix/lib/pkgconfig/brevis.pc"
echo "installed brevis $version into $prefix"
