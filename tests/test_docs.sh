#!/usr/bin/env bash
# The man page's OPTIONS block and the bash completion must equal what the
# options table generates; help and completion list only what each command
# takes; the completion completes. (test_man.sh renders and lints the page.)
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
"$bin" __man-environment > "$tmp/environment" || { echo "FAIL: __man-environment"; exit 1; }
awk -v f="$opts" -v e="$tmp/environment" '
    /^@OPTIONS@$/ { while ((getline l < f) > 0) print l; next }
    /^@ENVIRONMENT@$/ { while ((getline l < e) > 0) print l; next } { print }' \
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
# the environment: the library reads its settings in src/env.c alone, and
# every COSMOS3_* variable a source reads is in the table (but test hooks)
read=$(grep -l 'getenv("COSMOS3_' "$src"/src/*.c "$src"/cuda/*.cu 2>/dev/null | grep -v '/src/env\.c$' | tr '\n' ' ')
[ -z "$read" ] || { echo "FAIL: getenv of a COSMOS3_ setting outside src/env.c: $read"; fail=1; }
for v in $(cat "$src"/src/*.c "$src"/cuda/*.cu "$src"/app/*.c "$src"/tui/*.c |
           grep -o 'getenv("COSMOS3_[A-Z0-9_]*' | sed 's/getenv("//' | grep -v '^COSMOS3_TEST_' | sort -u); do
    grep -qx "\.It Ev $v" "$tmp/environment" || { echo "FAIL: $v is read but not in src/env.c's table"; fail=1; }
done
# every option of the table appears in --help (the rendered man page: test_man.sh)
for name in $("$bin" __completion | sed -n 's/^ *gen) COMPREPLY=(\$(compgen -W "\([^"]*\)".*/\1/p'); do
    case "$name" in --help) continue ;; esac
    "$bin" help gen | grep -q -- "$name" || { echo "FAIL: $name missing from 'cosmos3 help gen'"; fail=1; }
done
# a command's help lists only the options it takes
for ov in "--frames 5" "--fps 30" "--output x.png" "--overwrite"; do
    o=${ov%% *}
    "$bin" help serve | grep -q -- "$o " && { echo "FAIL: 'help serve' lists $o, which serve refuses"; fail=1; }
    # shellcheck disable=SC2086
    timeout 10 "$bin" serve --port 0 $ov > /dev/null 2> "$tmp/serve.err" < /dev/null; rc=$?
    [ $rc = 2 ] || { echo "FAIL: serve $ov: exit $rc, want 2 (refused before loading)"; fail=1; }
done
"$bin" help gen | grep -q -- "--preview" && { echo "FAIL: 'help gen' lists --preview, which gen refuses"; fail=1; }
# the man page has every command in its synopsis and command list
for c in gen tokenize info meta mkmodel repl tui serve bench; do
    grep -q "^\.Cm $c\$" "$src/man/cosmos3.1" || { echo "FAIL: the man page's SYNOPSIS lacks $c"; fail=1; }
    grep -q "^\.It Cm $c\$" "$src/man/cosmos3.1" || { echo "FAIL: the man page's COMMANDS lack $c"; fail=1; }
done
# the completion script loads and completes
if ! bash -c "source '$src/share/cosmos3.bash-completion'; COMP_WORDS=(cosmos3 gen --sched); COMP_CWORD=2; _cosmos3; [[ \" \${COMPREPLY[*]} \" == *' --schedule '* ]]"; then
    echo "FAIL: completion of 'cosmos3 gen --sched'"; fail=1
fi
if ! bash -c "source '$src/share/cosmos3.bash-completion'; COMP_WORDS=(cosmos3 gen --schedule k); COMP_CWORD=3; _cosmos3; [[ \"\${COMPREPLY[*]}\" == karras ]]"; then
    echo "FAIL: completion of '--schedule k'"; fail=1
fi
# completion: per command, after options with values, values only where taken
comp() { bash -c "source '$src/share/cosmos3.bash-completion'; COMP_WORDS=($1); COMP_CWORD=$2; _cosmos3; echo \" \${COMPREPLY[*]} \""; }
[[ "$(comp 'cosmos3 -m share/models/demo gen --st' 4)" == *' --steps '* ]] ||
    { echo "FAIL: completion of 'cosmos3 -m DIR gen --st': $(comp 'cosmos3 -m share/models/demo gen --st' 4)"; fail=1; }
[[ "$(comp 'cosmos3 serve --' 2)" == *' --frames '* ]] && { echo "FAIL: completion offers --frames for serve"; fail=1; }
[[ "$(comp 'cosmos3 serve --o' 2)" == *' --output '* ]] && { echo "FAIL: completion offers --output for serve"; fail=1; }
[[ "$(comp 'cosmos3 serve --' 2)" == *' --port '* ]] || { echo "FAIL: completion lacks --port for serve"; fail=1; }
[[ "$(comp 'cosmos3 gen --preview ""' 3)" == '  ' ]] ||
    { echo "FAIL: completion offers values for gen --preview: $(comp 'cosmos3 gen --preview ""' 3)"; fail=1; }
[[ "$(comp 'cosmos3 repl --preview s' 3)" == ' sixel ' ]] || { echo "FAIL: completion of repl --preview s"; fail=1; }
[[ "$(comp 'cosmos3 gen -m de' 3)" == *' demo '* ]] || { echo "FAIL: completion of -m de does not offer demo"; fail=1; }
[ $fail -eq 0 ] && echo "docs: ok"
exit $fail
