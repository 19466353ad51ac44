#!/usr/bin/env bash
# install_test.sh — installs zinc into a temporary prefix and uses it the way a program would:
#   1. `cmake --install` puts every promised file in place (docs/install.md's list);
#   2. libzinc.so (SONAME libzinc.so.MAJOR) and libzinc.a define exactly the functions that
#      include/zinc.h declares with ZINC_API, all named zinc_*, and nothing else;
#   3. `zinc --version` prints the version the library reports;
#   4. examples/c_minimal builds and runs (train, checkpoint, resume bit for bit) three ways:
#      find_package(zinc), `cc $(pkg-config --cflags --libs zinc)`, and statically against
#      libzinc.a with `pkg-config --static`.
# Any broken install rule fails one of these steps.
#
#   install_test.sh BUILD_DIR SOURCE_DIR VERSION LIBDIR CC [SANITIZE]
set -euo pipefail
build=$1 src=$2 version=$3 libdir=$4 cc=$5 sanitize=${6:-}
major=${version%%.*}
flags=""
[ -n "$sanitize" ] && flags="-fsanitize=$sanitize"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/zinc-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
step() { echo "== $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }

step "the installed files"
for f in include/zinc.h "$libdir/libzinc.so" "$libdir/libzinc.so.$major" "$libdir/libzinc.so.$version" \
         "$libdir/libzinc.a" "$libdir/pkgconfig/zinc.pc" "$libdir/cmake/zinc/zincConfig.cmake" \
         "$libdir/cmake/zinc/zincConfigVersion.cmake" "$libdir/cmake/zinc/zincTargets.cmake" \
         bin/zinc share/zinc/configs/zero2_bf16.json; do
    [ -e "$prefix/$f" ] || fail "$f is not installed"
done
cmp -s "$src/include/zinc.h" "$prefix/include/zinc.h" || fail "installed zinc.h differs from include/zinc.h"
n_src=$(ls "$src"/configs/*.json | wc -l)
n_inst=$(ls "$prefix"/share/zinc/configs/*.json | wc -l)
[ "$n_src" = "$n_inst" ] || fail "share/zinc/configs has $n_inst configs, configs/ has $n_src"
soname=$(readelf -d "$prefix/$libdir/libzinc.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libzinc.so.$major" ] || fail "SONAME is '$soname', expected libzinc.so.$major"

step "exported symbols: exactly zinc.h's ZINC_API functions"
grep '^ZINC_API' "$prefix/include/zinc.h" | grep -o 'zinc_[a-z0-9_]*(' | tr -d '(' | sort >"$tmp/api.txt"
nm -D --defined-only "$prefix/$libdir/libzinc.so" | awk '{print $NF}' | sort >"$tmp/so.txt"
nm -g --defined-only "$prefix/$libdir/libzinc.a" | awk 'NF == 3 {print $3}' | sort >"$tmp/a.txt"
diff "$tmp/api.txt" "$tmp/so.txt" || fail "libzinc.so exports differ from zinc.h (< header, > library)"
diff "$tmp/api.txt" "$tmp/a.txt" || fail "libzinc.a's global symbols differ from zinc.h (< header, > library)"
echo "$(wc -l <"$tmp/so.txt") symbols, all zinc_*"

step "zinc --version"
cli_version=$("$prefix/bin/zinc" --version | head -1)
[ "$cli_version" = "zinc $version" ] || fail "zinc --version says '$cli_version', expected 'zinc $version'"

run_example() {   # run_example BINARY NAME: trains, checkpoints, resumes; checks the output
    "$1" "$src/examples/c_minimal/zero2_fp32.json" "$tmp/ckpt-$2" >"$tmp/$2.out" 2>&1 ||
        { cat "$tmp/$2.out"; fail "the example built with $2 failed"; }
    grep -q "^zinc $version (built against $version)$" "$tmp/$2.out" ||
        { cat "$tmp/$2.out"; fail "the $2 example reports another library version"; }
    grep -q "bit for bit" "$tmp/$2.out" || { cat "$tmp/$2.out"; fail "the $2 example did not resume"; }
    echo "ok: $2"
}

step "examples/c_minimal with find_package(zinc)"
CFLAGS="$flags" LDFLAGS="$flags" cmake -S "$src/examples/c_minimal" -B "$tmp/build-cmake" \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" >"$tmp/cmake.log" 2>&1 ||
    { cat "$tmp/cmake.log"; fail "configuring the example with find_package(zinc)"; }
grep -q "^zinc_DIR:PATH=$prefix/$libdir/cmake/zinc$" "$tmp/build-cmake/CMakeCache.txt" ||
    fail "find_package(zinc) found another zinc: $(grep '^zinc_DIR' "$tmp/build-cmake/CMakeCache.txt")"
cmake --build "$tmp/build-cmake" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "building the example"; }
run_example "$tmp/build-cmake/c_minimal" cmake

step "examples/c_minimal with cc \$(pkg-config --cflags --libs zinc)"
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
pc_version=$(pkg-config --modversion zinc)
[ "$pc_version" = "$version" ] || fail "zinc.pc says version $pc_version"
# shellcheck disable=SC2046
"$cc" $flags -o "$tmp/c_minimal_pc" "$src/examples/c_minimal/main.c" \
    $(pkg-config --cflags --libs zinc) -pthread || fail "cc with pkg-config"
LD_LIBRARY_PATH="$prefix/$libdir" run_example "$tmp/c_minimal_pc" pkg-config

step "examples/c_minimal linked statically with libzinc.a (pkg-config --static)"
# shellcheck disable=SC2046
"$cc" $flags -o "$tmp/c_minimal_static" "$src/examples/c_minimal/main.c" $(pkg-config --cflags zinc) \
    $(pkg-config --static --libs zinc | sed 's/-lzinc /-l:libzinc.a /') || fail "cc with libzinc.a"
if readelf -d "$tmp/c_minimal_static" | grep -q 'NEEDED.*libzinc'; then
    fail "the static example still needs libzinc.so"
fi
run_example "$tmp/c_minimal_static" static
echo "install test passed"
