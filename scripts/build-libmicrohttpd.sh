#!/usr/bin/env bash
# Builds the pinned libmicrohttpd the gateway links, from Debian's own source archive.
#
#     scripts/build-libmicrohttpd.sh [--print-prefix]
#
# Debian 12 ships libmicrohttpd 0.9.75, whose parser answers some malformed requests 500
# itself (a chunk-size line over its buffer); 1.0's rewritten parser refuses them 4xx and
# is stricter elsewhere. This fetches the 1.0.1 orig tarball from Debian's pool (the
# trixie and bookworm-backports package), or snapshot.debian.org when the pool fails,
# checks its sha256, applies scripts/patches/libmicrohttpd-1.0.1-*.patch (two fixes of
# the library's own bugs and the 501 RFC 9112 asks for, each explained in its file) and
# installs a static, position-independent library with HTTPS (GnuTLS) into a cache
# prefix outside any build tree:
#     ${DSV_MHD_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/dsvisor/deps/libmicrohttpd-1.0.1}
# cmake/Deps.cmake looks there. Static, so no rpath or loader path is needed, and built
# with -O2 and no sanitizers, so one copy links into every build (RelWithDebInfo,
# Release, ASan, the clang/libFuzzer build). Idempotent: a prefix holding this version,
# tarball, patches and configuration is left as it is. --print-prefix prints the prefix
# and exits. Needs curl, a C toolchain, make, patch and GnuTLS's headers
# (scripts/bootstrap.sh installs them and then runs this).
set -euo pipefail

VERSION=1.0.1
TARBALL=libmicrohttpd_$VERSION.orig.tar.gz
SIZE_BYTES=2239593
SHA256=a89e09fc9b4de34dde19f4fcb4faaa1ce10299b9908db1132bbfa1de47882b94
SHA1=08e34fa5ec5b552e09ad98b08d8d7da2ba9496ca  # snapshot.debian.org names files by sha1
URLS=(
  "http://deb.debian.org/debian/pool/main/libm/libmicrohttpd/$TARBALL"
  "https://snapshot.debian.org/file/$SHA1"
)
# Tests and documentation off; HTTPS required, since the gateway serves TLS through MHD.
CONFIGURE_ARGS=(--disable-shared --enable-static --with-pic --enable-https=yes --with-gnutls
  --disable-doc --disable-examples --disable-curl)
CFLAGS_MHD="-O2"

PREFIX=${DSV_MHD_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/dsvisor/deps/libmicrohttpd-$VERSION}
if [ "${1:-}" = "--print-prefix" ]; then
  echo "$PREFIX"
  exit 0
elif [ $# -gt 0 ]; then
  echo "usage: scripts/build-libmicrohttpd.sh [--print-prefix]" >&2
  exit 2
fi

die() { echo "build-libmicrohttpd: $*" >&2; exit 1; }

PATCHES=("$(cd "$(dirname "$0")" && pwd)"/patches/libmicrohttpd-"$VERSION"-*.patch)
[ -f "${PATCHES[0]}" ] || PATCHES=()
# What the prefix was built from; a different line means build again.
STAMP_LINE="libmicrohttpd $VERSION sha256:$SHA256 ${CONFIGURE_ARGS[*]} CFLAGS=$CFLAGS_MHD"
for p in "${PATCHES[@]}"; do
  STAMP_LINE+=" $(basename "$p"):$(sha256sum "$p" | cut -d' ' -f1)"
done
STAMP=$PREFIX/.dsvisor-build
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_LINE" ] && [ -f "$PREFIX/lib/libmicrohttpd.a" ]; then
  echo "build-libmicrohttpd: libmicrohttpd $VERSION present in $PREFIX"
  exit 0
fi

for tool in curl sha256sum make cc patch; do
  command -v "$tool" >/dev/null || die "'$tool' is missing (scripts/bootstrap.sh installs it)"
done
pkg-config --exists gnutls || die "GnuTLS's headers are missing: install the Debian package 'libgnutls28-dev' (scripts/bootstrap.sh does)"

parent=$(dirname "$PREFIX")
mkdir -p "$parent"
# One build at a time per prefix: a second caller waits, then finds the stamp.
exec 9>"$PREFIX.lock"
flock 9
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_LINE" ] && [ -f "$PREFIX/lib/libmicrohttpd.a" ]; then
  echo "build-libmicrohttpd: libmicrohttpd $VERSION present in $PREFIX (built by another run)"
  exit 0
fi

work=$(mktemp -d "$parent/libmicrohttpd-$VERSION.build.XXXXXX")
trap 'rm -rf "$work"' EXIT

fetched=""
tried=()
for url in "${URLS[@]}"; do
  echo "build-libmicrohttpd: fetching $url"
  if ! curl -fsSL --retry 2 --connect-timeout 20 -o "$work/$TARBALL" "$url"; then
    tried+=("$url (download failed)")
    continue
  fi
  got=$(sha256sum "$work/$TARBALL" | cut -d' ' -f1)
  if [ "$got" != "$SHA256" ]; then
    tried+=("$url (sha256 $got, $(stat -c %s "$work/$TARBALL") bytes; want $SHA256, $SIZE_BYTES bytes)")
    continue
  fi
  fetched=$url
  break
done
if [ -z "$fetched" ]; then
  printf 'build-libmicrohttpd: could not fetch %s:\n' "$TARBALL" >&2
  printf '  %s\n' "${tried[@]}" >&2
  exit 1
fi

tar -xzf "$work/$TARBALL" -C "$work"
src=$work/libmicrohttpd-$VERSION
[ -x "$src/configure" ] || die "$TARBALL from $fetched has no libmicrohttpd-$VERSION/configure"
for p in "${PATCHES[@]}"; do
  patch -d "$src" -p1 --forward --quiet <"$p" || die "$(basename "$p") does not apply to $TARBALL"
done
start=$(date +%s)
log=$work/build.log
echo "build-libmicrohttpd: building $VERSION into $PREFIX (log kept on failure: $parent/libmicrohttpd-$VERSION.build.log)"
# The caller's compiler settings (clang, sanitizer flags) stay out: this copy serves every build.
if ! (cd "$src" &&
      env -u CPPFLAGS -u LDFLAGS -u LIBS CC=cc CFLAGS="$CFLAGS_MHD" \
        ./configure --prefix="$PREFIX" "${CONFIGURE_ARGS[@]}" &&
      make -j"$(nproc)" &&
      make install DESTDIR="$work/stage") >"$log" 2>&1; then
  cp "$log" "$parent/libmicrohttpd-$VERSION.build.log"
  tail -20 "$log" >&2
  die "configure or make failed (log: $parent/libmicrohttpd-$VERSION.build.log)"
fi
grep -q '^#define HTTPS_SUPPORT 1' "$src/MHD_config.h" || die "built without HTTPS support (GnuTLS not found by configure)"

# Swap the finished tree in whole, so an interrupted run never leaves a half prefix.
rm -rf "$PREFIX.old"
[ -e "$PREFIX" ] && mv "$PREFIX" "$PREFIX.old"
mv "$work/stage$PREFIX" "$PREFIX"
rm -rf "$PREFIX.old" "$parent/libmicrohttpd-$VERSION.build.log"
echo "$STAMP_LINE" >"$STAMP"
echo "build-libmicrohttpd: libmicrohttpd $VERSION built in $(( $(date +%s) - start )) s into $PREFIX"
