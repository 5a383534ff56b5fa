#!/usr/bin/env bash
# The rendered man page (mandoc): every option of the table and every
# command appears, the page is lint-clean and renders. Skips (77) without
# mandoc; tests/test_docs.sh checks the page's source without it.
set -u
bin=${COSMOS3_BIN:?COSMOS3_BIN must point at the cosmos3 binary}
src=${COSMOS3_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
command -v mandoc > /dev/null || { echo "SKIP: mandoc not installed (.ci/setup, or: apt-get install mandoc)"; exit 77; }
fail=0
page=$(mandoc -Tascii "$src/man/cosmos3.1" 2>/dev/null | col -bx)
[ -n "$page" ] || { echo "FAIL: mandoc rendered nothing"; exit 1; }
for name in $("$bin" __completion | sed -n 's/^ *gen) COMPREPLY=(\$(compgen -W "\([^"]*\)".*/\1/p'); do
    case "$name" in --help) continue ;; esac
    grep -qF -- "$name" <<< "$page" || { echo "FAIL: $name missing from the man page"; fail=1; }
done
synopsis=$(sed -n '/^SYNOPSIS/,/^DESCRIPTION/p' <<< "$page")
for c in gen tokenize info meta mkmodel repl tui serve bench; do
    grep -qE "cosmos3 \[?$c" <<< "$synopsis" || { echo "FAIL: $c missing from the man page's SYNOPSIS"; fail=1; }
done
out=$(mandoc -Tlint -W warning "$src/man/cosmos3.1" 2>&1)
if [ -n "$out" ]; then echo "FAIL: mandoc -Tlint:"; echo "$out" | head -20; fail=1; fi
mandoc -Tutf8 "$src/man/cosmos3.1" > /dev/null || { echo "FAIL: mandoc cannot render"; fail=1; }
[ $fail -eq 0 ] && echo "man: ok"
exit $fail
