#!/usr/bin/env bash
# `cosmos3 tui` in tmux against the tiny fixture model on the CPU: the device
# panel with memory numbers, the progress bar reaching N/N, both CFG branch
# timings, a resize during a run, the input line running REPL commands and a
# second generation, the half-block image, q quitting with the terminal
# restored, Ctrl-C at idle exiting 130, NO_COLOR, and the message without a
# terminal.
set -u
bin=${COSMOS3_BIN:?}
fx=${COSMOS3_FIXTURES:-}
model="$fx/tiny-a/model"
[ -f "$model/model_index.json" ] || { echo "SKIP: fixtures not found (set COSMOS3_FIXTURES)"; exit 77; }
command -v tmux > /dev/null || { echo "SKIP: tmux not installed"; exit 77; }
if "$bin" tui < /dev/null 2>&1 | grep -q "built without ncurses and readline"; then
    echo "SKIP: built without ncurses and readline"; exit 77
fi
tmp=$(mktemp -d)
sock="c3tui$$"
cleanup() { tmux -L "$sock" kill-server 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
cd "$tmp"
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
. "${COSMOS3_SRCDIR:?}/tests/tmux_screen.sh"
screen() { t capture-pane -p > "$tmp/screen" 2>/dev/null; }

# without a terminal: one line naming the fix
"$bin" tui -m "$model" < /dev/null > out 2> err
rc=$?
[ $rc = 2 ] && grep -q "needs a terminal" err && ok || bad "tui without a terminal: exit $rc: $(cat err)"

steps=30
t new-session -d -x 140 -y 45 -c "$tmp" \
    "env LANG=C.UTF-8 XDG_STATE_HOME='$tmp/state' '$bin' tui -m '$model' -W 512 -H 512 --steps $steps \
     --guidance-interval none --seed 3 -p 'a red fox in the snow'; echo EXIT=\$?; sleep 60"
expect_screen 'CPU .*rank 0 \[' "device panel" 15
expect_screen 'weights [0-9.]+ [KMG]iB +K/V [0-9.]+ [KMG]iB +activations [0-9.]+ [KMG]iB +free [0-9.]+ [KMG]iB \(driver\)' \
    "memory numbers"
expect_screen 'layout: tp 1 x cfg 1 x ulysses 1 = 1 rank on cpu' "layout"
expect_screen "\] [0-9]+/$steps steps +[0-9.]+ s/step +ETA [0-9]+s +running" "progress while running" 20
# resize in the middle of the run
t resize-window -x 100 -y 34
expect_screen "\] $steps/$steps steps" "progress reaches N/N after a resize" 60
screen
[ "$(LC_ALL=C.UTF-8 wc -L < "$tmp/screen")" -le 100 ] && ok ||
    bad "lines wider than the resized window"
expect_screen "step +$steps: cond [0-9.]+s \(group 0\) +uncond [0-9.]+s \(group 0\) +gather\+combine [0-9.]+s" \
    "both branch timings"
grep -qE 'cond 0\.[0-9]*[1-9][0-9]*s' "$tmp/screen" && ok || bad "the cond time is not positive"
expect_screen 'wrote cosmos3-3.png' "the log shows the file" 20
screen
grep -q $'\xe2\x96\x80' "$tmp/screen" && ok || bad "no half-block image"
expect_screen '^ keys: : or Enter' "key help"
expect_screen '^cosmos3 > ' "the input line"
# the input line runs the REPL's commands and prompts
t send-keys ':' 'set steps 2' Enter
expect_screen '^steps = 2' "set through the input line" 5
t send-keys ':' 'set width 32' Enter ':' 'set height 32' Enter ':' 'seed 4' Enter
t send-keys ':' 'a second image' Enter
expect_screen '\] 2/2 steps' "second run progress" 20
expect_screen 'wrote cosmos3-4.png' "second run written" 20
[ -f cosmos3-3.png ] && [ -f cosmos3-4.png ] && ok || bad "PNGs missing: $(ls)"
t send-keys ':' 'bogus-command-that-is-a-prompt' Escape
sleep 0.3
t send-keys p
expect_screen 'p preview off' "p toggles the preview" 5
t send-keys q
expect_screen '^EXIT=0$' "q quits with 0" 10
screen
grep -q 'cosmos3 tui' "$tmp/screen" && bad "the dashboard is still on screen after q (terminal not restored)" || ok
t kill-server 2>/dev/null

# Ctrl-C when idle exits 130 and restores the terminal; NO_COLOR is honoured
sock="${sock}b"
t new-session -d -x 100 -y 30 -c "$tmp" \
    "env NO_COLOR=1 XDG_STATE_HOME='$tmp/state' '$bin' tui -m '$model' -W 32 -H 32 --steps 2; echo EXIT=\$?; sleep 60"
expect_screen 'loaded tiny-a' "second dashboard" 15
t send-keys C-c
expect_screen '^EXIT=130$' "Ctrl-C at idle exits 130" 10
t kill-server 2>/dev/null

echo "tui: $pass passed, $fail failed"
[ $fail = 0 ]
