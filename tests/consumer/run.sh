#!/usr/bin/env bash
# tests/consumer/run.sh pkg-config|cmake|destdir - `make install` into a temporary prefix, a
# consumer (tests/consumer/main.c) built against it, run, then `make uninstall`, which must leave
# no file behind. Run from the repository root by `make test` (MAKE and CC from the Makefile).
#   pkg-config  `pkg-config --cflags --libs flashattn` and flashattn-noblas, PKG_CONFIG_PATH set
#   cmake       find_package(flashattn 0.2 REQUIRED): flashattn::flashattn and ::flashattn_noblas;
#               find_package(flashattn 0.1) and (flashattn 1.0) must be refused by the version file
#   destdir     DESTDIR staging: every file under DESTDIR, the .pc naming the final PREFIX
# Exit 77 (skipped) when the tool the mode needs is missing.
set -euo pipefail
mode=${1:?usage: tests/consumer/run.sh pkg-config|cmake|destdir}
MAKE=${MAKE:-make} CC=${CC:-cc}
version=$(sed -n 's/^#define FLASHATTN_VERSION_STRING "\(.*\)"/\1/p' flashattn.h)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/flashattn-consumer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

installed() { (cd "$1" && find . -type f | sort); }
expect_files() {   # the exact set make install puts under $1 (a prefix)
  local got want
  got=$(installed "$1")
  want=$(printf '%s\n' ./include/flashattn.h ./lib/cmake/flashattn/flashattnConfig.cmake \
         ./lib/cmake/flashattn/flashattnConfigVersion.cmake ./lib/pkgconfig/flashattn-noblas.pc \
         ./lib/pkgconfig/flashattn.pc | sort)
  if [ "$got" != "$want" ]; then echo "installed files differ from the expected five:"; echo "$got"; exit 1; fi
}
uninstall_clean() {   # make uninstall "$@", then nothing may be left under $1
  local root=$1; shift
  $MAKE --no-print-directory uninstall "$@"
  if [ -n "$(installed "$root")" ]; then echo "make uninstall left:"; installed "$root"; exit 1; fi
  echo "make uninstall removed every installed file"
}

case $mode in
pkg-config)
  command -v pkg-config >/dev/null || { echo "pkg-config not found (Debian: apt-get install pkg-config)"; exit 77; }
  $MAKE --no-print-directory install PREFIX="$prefix"
  expect_files "$prefix"
  export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
  for pc in flashattn flashattn-noblas; do
    [ "$(pkg-config --modversion $pc)" = "$version" ] || { echo "$pc: version $(pkg-config --modversion $pc), not $version"; exit 1; }
    flags="$(pkg-config --cflags --libs $pc)"
    echo "pkg-config --cflags --libs $pc: $flags"
    # shellcheck disable=SC2086
    $CC -std=c99 -pedantic -Wall -Wextra -Werror -O2 tests/consumer/main.c -o "$tmp/consumer-$pc" $flags
    "$tmp/consumer-$pc" "$([ $pc = flashattn-noblas ] && echo noblas || echo blas)" "$version"
  done
  uninstall_clean "$prefix" PREFIX="$prefix"
  echo "step-detail: $version installed, flashattn and flashattn-noblas consumers built, run, uninstalled"
  ;;
cmake)
  command -v cmake >/dev/null || { echo "cmake not found (Debian: apt-get install cmake)"; exit 77; }
  $MAKE --no-print-directory install PREFIX="$prefix"
  expect_files "$prefix"
  cmake -S tests/consumer -B "$tmp/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$CC" \
        -DCMAKE_BUILD_TYPE=Release
  cmake --build "$tmp/build"
  "$tmp/build/consumer" blas "$version"
  "$tmp/build/consumer_noblas" noblas "$version"
  for bad in 0.1 1.0 9.9; do   # versions the installed one must not serve
    if cmake -S tests/consumer -B "$tmp/build-$bad" -DCMAKE_PREFIX_PATH="$prefix" -DFLASHATTN_WANT=$bad \
         -DCMAKE_C_COMPILER="$CC" > "$tmp/bad.log" 2>&1; then
      echo "find_package(flashattn $bad) accepted flashattn $version"; exit 1
    fi
    grep -q "$version" "$tmp/bad.log" || { cat "$tmp/bad.log"; exit 1; }
    echo "find_package(flashattn $bad) refused, as it should be"
  done
  uninstall_clean "$prefix" PREFIX="$prefix"
  echo "step-detail: flashattn::flashattn and ::flashattn_noblas consumers built and run; 0.1, 1.0, 9.9 refused; uninstalled"
  ;;
destdir)
  stage=$tmp/stage final=/opt/flashattn-test
  $MAKE --no-print-directory install DESTDIR="$stage" PREFIX="$final"
  expect_files "$stage$final"
  [ -z "$(cd "$stage" && find . -type f -not -path ".$final/*")" ] || { echo "files outside DESTDIR/PREFIX"; exit 1; }
  grep -qx "prefix=$final" "$stage$final/lib/pkgconfig/flashattn.pc" || { echo "flashattn.pc does not name $final"; exit 1; }
  if [ -e "$final" ]; then echo "$final exists: make install wrote outside DESTDIR?"; exit 1; fi
  uninstall_clean "$stage" DESTDIR="$stage" PREFIX="$final"
  echo "step-detail: the five files under DESTDIR/PREFIX only, the .pc naming PREFIX; uninstalled"
  ;;
*) echo "unknown mode $mode"; exit 2 ;;
esac
