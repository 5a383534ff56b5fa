#!/bin/bash
# The library as a user gets it: `meson install --destdir D` puts cosmos3.h,
# cosmos3_tools.h,
# libcosmos3.so, libcosmos3.a and cosmos3.pc under D; a program outside the
# tree (tests/api_outside.c with the demo judge), built with
# `pkg-config --cflags --libs cosmos3` and -fsanitize=address,undefined,
# opens the installed demo model and checks what the API promises.
set -u
build=${COSMOS3_BUILDDIR:?}
src=${COSMOS3_SRCDIR:?}
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

meson install -C "$build" --destdir "$tmp/root" --no-rebuild --quiet >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; fail "meson install"; }
for f in include/cosmos3.h include/cosmos3_tools.h libcosmos3.so libcosmos3.a cosmos3.pc man3/cosmos3.3; do
    [ -n "$(find "$tmp/root" -path "*/$f" -print -quit)" ] || fail "$f not installed"
done
pc=$(dirname "$(find "$tmp/root" -name cosmos3.pc -print -quit)")
export PKG_CONFIG_PATH=$pc PKG_CONFIG_SYSROOT_DIR=$tmp/root
flags=$(pkg-config --cflags --libs cosmos3) || fail "pkg-config cosmos3"
libdir=$(dirname "$(find "$tmp/root" -name libcosmos3.so -print -quit)")
model=$(dirname "$(find "$tmp/root" -path '*/models/demo/model_index.json' -print -quit)")
[ -d "$model" ] || fail "the demo model is not installed"

if command -v mandoc >/dev/null; then
    out=$(mandoc -Tlint -W warning "$src/man/cosmos3.3" 2>&1)
    [ -z "$out" ] || fail "mandoc -Tlint man/cosmos3.3: $out"
fi

# outside the tree: only the installed header (no -I into the source)
mkdir "$tmp/outside"
cp "$src/tests/api_outside.c" "$src"/demo/demo_judge.[ch] "$src"/demo/demo_world.[ch] "$tmp/outside/"
cd "$tmp/outside" || exit 1
# shellcheck disable=SC2086 # flags are words
"$cc" -std=c11 -Wall -Wextra -Werror -g -fsanitize=address,undefined -fno-omit-frame-pointer \
    api_outside.c demo_judge.c demo_world.c $flags -lm -o api_outside ||
    fail "compiling the outside program with pkg-config"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 \
    LD_LIBRARY_PATH=$libdir TMPDIR=$tmp ./api_outside "$model" "$tmp" || fail "api_outside"
ls -d "$tmp"/cosmos3-bench-vae.* >/dev/null 2>&1 && fail "cosmos3_bench left its VAE folder"
# the installed command prints the ids the library gives the outside program
ids=$(LD_LIBRARY_PATH=$libdir "$(find "$tmp/root" -path '*/bin/cosmos3' -print -quit)" tokenize -m "$model" --raw "a red circle") ||
    fail "cosmos3 tokenize"
[ "$ids" = "64 2518 12671" ] || fail "cosmos3 tokenize --raw 'a red circle' printed '$ids', the library 64 2518 12671"
echo "install: ok"
