#!/usr/bin/env bash
# The man page's OPTIONS block and the bash completion must equal what the
# options table generates; the man page must be lint-clean.
#   tests/test_docs.sh            check (meson test 'docs')
#   tests/test_docs.sh --update   regenerate man/cosmos3.1 and share/cosmos3.bash-completion
set -u
bin=${COSMOS3_BIN:?COSMOS3_BIN must point at the cosmos3 binary}
src=${COSMOS3_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
opts="$tmp/options"
"$bin" __man-options > "$opts" || { echo "FAIL: __man-options"; exit 1; }
awk -v f="$opts" '/^@OPTIONS@$/ { while ((getline l < f) > 0) print l; next } { print }' \
    "$src/man/cosmos3.1.in" > "$tmp/cosmos3.1"
"$bin" __completion > "$tmp/completion" || { echo "FAIL: __completion"; exit 1; }
if [ "${1:-}" = "--update" ]; then
    cp "$tmp/cosmos3.1" "$src/man/cosmos3.1"
    cp "$tmp/completion" "$src/share/cosmos3.bash-completion"
    echo "updated man/cosmos3.1 and share/cosmos3.bash-completion"
    exit 0
fi
if ! diff -u "$src/man/cosmos3.1" "$tmp/cosmos3.1" > "$tmp/d1"; then
    echo "FAIL: man/cosmos3.1 is out of date with the options table (run tests/test_docs.sh --update)"
    head -30 "$tmp/d1"; fail=1
fi
if ! diff -u "$src/share/cosmos3.bash-completion" "$tmp/completion" > "$tmp/d2"; then
    echo "FAIL: share/cosmos3.bash-completion is out of date (run tests/test_docs.sh --update)"
    head -30 "$tmp/d2"; fail=1
fi
# every option of the table appears in the man page and in --help
for name in $("$bin" __completion | sed -n 's/^ *gen) COMPREPLY=(\$(compgen -W "\([^"]*\)".*/\1/p'); do
    case "$name" in --help) continue ;; esac
    mandoc -Tascii "$src/man/cosmos3.1" 2>/dev/null | col -bx | grep -qF -- "$name" ||
        { echo "FAIL: $name missing from the man page"; fail=1; }
    "$bin" help gen | grep -q -- "$name" || { echo "FAIL: $name missing from 'cosmos3 help gen'"; fail=1; }
done
if command -v mandoc >/dev/null; then
    out=$(mandoc -Tlint -W warning "$src/man/cosmos3.1" 2>&1)
    if [ -n "$out" ]; then echo "FAIL: mandoc -Tlint:"; echo "$out" | head -20; fail=1; fi
    mandoc -Tutf8 "$src/man/cosmos3.1" > /dev/null || { echo "FAIL: mandoc cannot render"; fail=1; }
else
    echo "mandoc not installed: lint skipped"
fi
# the completion script loads and completes
if ! bash -c "source '$src/share/cosmos3.bash-completion'; COMP_WORDS=(cosmos3 gen --sched); COMP_CWORD=2; _cosmos3; [[ \" \${COMPREPLY[*]} \" == *' --schedule '* ]]"; then
    echo "FAIL: completion of 'cosmos3 gen --sched'"; fail=1
fi
if ! bash -c "source '$src/share/cosmos3.bash-completion'; COMP_WORDS=(cosmos3 gen --schedule k); COMP_CWORD=3; _cosmos3; [[ \"\${COMPREPLY[*]}\" == karras ]]"; then
    echo "FAIL: completion of '--schedule k'"; fail=1
fi
[ $fail -eq 0 ] && echo "docs: ok"
exit $fail
