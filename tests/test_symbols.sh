#!/usr/bin/env bash
# The library's surface: libcosmos3.so exports the calls cosmos3.h and
# cosmos3_tools.h declare (COSMOS3_API) and nothing else; cosmos3.h keeps to
# generation; the applications' archive reaches into the
# library only through them (its other outside symbols are the base
# library's, libcosmos3base.a: base/c3base.c compiled once, linked into both
# sides); no app/ or tui/ file
# includes a src/ header; the cosmos3 program loads libcosmos3.so and holds
# no engine code of its own.
set -u
build=${COSMOS3_BUILDDIR:?}
src=${COSMOS3_SRCDIR:?}
command -v nm >/dev/null || { echo "SKIP: nm not installed (binutils)"; exit 77; }
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

so=$build/libcosmos3.so
[ -e "$so" ] || { echo "FAIL: no $so"; exit 1; }
nm -D --defined-only "$so" | awk '{print $3}' | sort -u >"$tmp/exported"
[ -s "$tmp/exported" ] && ok || bad "libcosmos3.so exports nothing"
others=$(grep -v '^cosmos3_' "$tmp/exported" | head -5 | tr '\n' ' ')
[ -z "$others" ] && ok || bad "libcosmos3.so exports more than cosmos3_*: $others"
calls() { grep -o 'COSMOS3_API [^(]*(' "$@" | grep -o 'cosmos3_[a-z_0-9]*' | sort -u; }
calls "$src/include/cosmos3.h" >"$tmp/public"
calls "$src/include/cosmos3_tools.h" >"$tmp/tools"
sort -u "$tmp/public" "$tmp/tools" >"$tmp/declared"
[ "$(wc -l <"$tmp/public")" -ge 20 ] && ok || bad "cosmos3.h declares only $(wc -l <"$tmp/public") calls"
[ "$(wc -l <"$tmp/tools")" -ge 10 ] && ok || bad "cosmos3_tools.h declares only $(wc -l <"$tmp/tools") calls"
# the public header keeps to generation: the tools' calls, a card's
# constants and paths outside the repository are cosmos3_tools.h's or none
t=$(grep -E '^cosmos3_(checkpoint|tokeniz|mkmodel|bench)' "$tmp/public" | head -4 | tr '\n' ' ')
[ -z "$t" ] && ok || bad "cosmos3.h declares tool calls (cosmos3_tools.h's): $t"
t=$(grep -nE 'PEAK|TFLOPS|989|\.\./' "$src/include/cosmos3.h" "$src/include/cosmos3_tools.h" | head -3)
[ -z "$t" ] && ok || bad "a card's constant or a path outside the repository in the headers: $t"
# every call has its line in the library's man page
t=$(while read -r c; do grep -q "^\.Fn $c " "$src/man/cosmos3.3" || echo "$c"; done <"$tmp/declared" | head -5 | tr '\n' ' ')
[ -z "$t" ] && ok || bad "calls missing from man/cosmos3.3's synopsis: $t"
missing=$(comm -23 "$tmp/declared" "$tmp/exported" | tr '\n' ' ')
[ -z "$missing" ] && ok || bad "declared in the headers but not exported: $missing"
extra=$(comm -13 "$tmp/declared" "$tmp/exported" | tr '\n' ' ')
[ -z "$extra" ] && ok || bad "exported but not declared with COSMOS3_API: $extra"

# the applications: what they need from outside, that the library defines
nm -u "$build/libcosmos3app.a" 2>/dev/null | awk '{print $2}' | sort -u >"$tmp/app_needs"
nm --defined-only -g "$build/libcosmos3.a" 2>/dev/null | awk 'NF == 3 {print $3}' | sort -u >"$tmp/lib_has"
nm --defined-only -g "$build/libcosmos3base.a" 2>/dev/null | awk 'NF == 3 {print $3}' | sort -u >"$tmp/util_has"
[ -s "$tmp/app_needs" ] && [ -s "$tmp/lib_has" ] && ok || bad "cannot read the archives' symbols"
reach=$(comm -12 "$tmp/app_needs" "$tmp/lib_has" | grep -v '^cosmos3_' | comm -23 - "$tmp/util_has" |
        head -8 | tr '\n' ' ')
[ -z "$reach" ] && ok || bad "app/ and tui/ call library internals: $reach"
grep -q '^cosmos3_generate$' "$tmp/app_needs" && ok || bad "the applications do not call cosmos3_generate?"
# and no app/ or tui/ source includes a src/ header
hdrs=$(cd "$src/src" && ls ./*.h | sed 's|^\./||')
found=""
for h in $hdrs; do
    f=$(grep -l "#include \"$h\"" "$src"/app/*.[ch] "$src"/tui/*.[ch] 2>/dev/null | head -1)
    [ -n "$f" ] && found="$found $h($f)"
done
[ -z "$found" ] && ok || bad "src/ headers included by the applications:$found"

# the cosmos3 program is on the shared library (nothing else links it in)
bin=${COSMOS3_BIN:-$build/cosmos3}
if command -v readelf >/dev/null; then
    readelf -d "$bin" | grep -q 'NEEDED.*libcosmos3\.so' && ok || bad "cosmos3 does not load libcosmos3.so"
fi
mine=$(nm --defined-only "$bin" 2>/dev/null | awk '{print $3}' | grep -xE 'model_load|plan_make|ckpt_open|denoise_run' | head -3 | tr '\n' ' ')
[ -z "$mine" ] && ok || bad "cosmos3 carries library internals of its own: $mine"

echo "symbols: $pass passed, $fail failed"
[ $fail = 0 ]
