#!/usr/bin/env bash
# Two Ctrl-Cs while gen writes its output (issue 38, N9): whatever moment
# they land, the run leaves the old file (exit 130, cancelled) or the whole
# new one (exit 0), never a half-written file, a stray temporary file, or
# exit 130 with the new file in place. tests/sig_hook.c (LD_PRELOAD) sends
# the two SIGINTs to the process, as a terminal does, at set moments:
#   write   both once the temporary file is written: cancelled, the old file kept
#   before  the second as the rename starts: either outcome, whole
#   after   the second the moment the rename has returned: the new file is
#           in place, so the run finishes with exit 0 (the audit saw 130)
# for a PNG and a WebM over an old file (--overwrite), and a new PNG.
#   tests/test_place_signals.sh HOOK.so
set -u
hook=$(readlink -f "${1:?usage: test_place_signals.sh sig_hook.so}") # before cli_lib.sh's cd
[ -f "$hook" ] || { echo "place_signals: no $1"; exit 1; }
src=${COSMOS3_SRCDIR:?}
# shellcheck source=tests/cli_lib.sh
. "$src/tests/cli_lib.sh"
demo=$src/share/models/demo
# under AddressSanitizer the hook is preloaded ahead of its runtime
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
fmts=(png)
"$bin" --version | grep -q '^  video files *yes' && fmts+=(webm)

# gen_to OUT SEED [ARGS]: the demo picture (a 5-frame clip for .webm) into OUT
gen_to() {
    local out=$1 seed=$2; shift 2
    local f=()
    case $out in *.webm) f=(-F 5) ;; esac
    "$bin" gen -m "$demo" -p "a red circle on a blue background" -s 2 -S "$seed" "${f[@]}" -o "$out" \
        --device cpu -q "$@"
}
# whole FILE: the new run's file, whole: the PNG byte for byte; the WebM
# (its Matroska segment id is random) the same size, read back with 5 frames
whole() {
    case $1 in
        *.png) cmp -s "$1" ref.png ;;
        *) ! cmp -s "$1" "old.${1##*.}" && [ "$(stat -c %s "$1")" = "$(stat -c %s "ref.${1##*.}")" ] &&
            "$bin" info "$1" 2>/dev/null | grep -q '^frames: 5 ' ;;
    esac
}
# no NAME.tmp.* (a file or a folder, hidden or not) left beside OUT
no_temp() { ! ls -A | grep -qE "^\.?$1\.tmp\."; }

for fmt in "${fmts[@]}"; do
    gen_to "ref.$fmt" 1 2>/dev/null || bad "gen ref.$fmt"
    gen_to "old.$fmt" 2 2>/dev/null || bad "gen old.$fmt"
    cmp -s "ref.$fmt" "old.$fmt" && bad "seeds 1 and 2 give the same $fmt" || ok
    for mode in write before after; do
        cp "old.$fmt" "out.$fmt"
        rm -f hook.log
        C3HOOK_MODE=$mode C3HOOK_NAME=out.$fmt C3HOOK_LOG=$tmp/hook.log LD_PRELOAD=$hook \
            gen_to "out.$fmt" 1 --overwrite 2>err
        rc=$?
        [ "$(grep -c SIGINT hook.log 2>/dev/null)" = 2 ] && ok ||
            bad "$fmt $mode: the hook sent $(grep -c SIGINT hook.log 2>/dev/null) Ctrl-Cs, want 2"
        case $rc in
            130) cmp -s "out.$fmt" "old.$fmt" && ok || bad "$fmt $mode: exit 130 (cancelled) but out.$fmt is not the old file" ;;
            0) whole "out.$fmt" && ok || bad "$fmt $mode: exit 0 but out.$fmt is not the whole new file" ;;
            *) bad "$fmt $mode: exit $rc: $(cat err)" ;;
        esac
        no_temp "out.$fmt" && ok || bad "$fmt $mode: a temporary file is left: $(ls -A)"
        [ $mode = write ] && { [ $rc = 130 ] && ok || bad "$fmt write: exit $rc, want 130 (cancelled before the rename)"; }
        [ $mode = after ] && { [ $rc = 0 ] && ok || bad "$fmt after: exit $rc with the new file in place, want 0"; }
    done
done

# a new file (no --overwrite: the rename refuses an existing name)
for mode in write after; do
    rm -f new.png hook.log
    C3HOOK_MODE=$mode C3HOOK_NAME=new.png C3HOOK_LOG=$tmp/hook.log LD_PRELOAD=$hook gen_to new.png 1 2>err
    rc=$?
    [ "$(grep -c SIGINT hook.log 2>/dev/null)" = 2 ] && ok || bad "new $mode: the hook did not send 2 Ctrl-Cs"
    if [ $mode = write ]; then
        [ $rc = 130 ] && [ ! -e new.png ] && ok || bad "new write: exit $rc, new.png $( [ -e new.png ] && echo present || echo absent)"
    else
        [ $rc = 0 ] && cmp -s new.png ref.png && ok || bad "new after: exit $rc: $(cat err)"
    fi
    no_temp new.png && ok || bad "new $mode: a temporary file is left: $(ls -A)"
done
finish place_signals
