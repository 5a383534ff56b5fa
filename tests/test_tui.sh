#!/usr/bin/env bash
# `cosmos3 tui` in tmux with the built-in demo model on the CPU:
#   1. a whole prompt typed straight after start (with a q and a c in it)
#      lands on the input line and generates; the dashboard stays up;
#   2. the device panel with memory numbers, the progress bar reaching N/N,
#      both CFG branch timings, a resize during a run, the input line running
#      REPL commands and a second generation, the half-block image;
#   3. keys typed during a run are kept (a line entered meanwhile is queued
#      and runs next); F10 during a run asks first (n goes on, y quits, 130);
#      F2 toggles the preview; F10 when idle quits with 0, terminal restored;
#   4. Ctrl-C when idle does not quit, twice within a second does (130);
#      NO_COLOR is honoured;
#   5. at 80x24 the seed, the layout and the plan are not cut off, and no
#      text is drawn light grey (white) or dim, which light terminals lose;
#   6. without a terminal: one line naming the fix.
set -u
bin=${COSMOS3_BIN:?}
command -v tmux > /dev/null || { echo "SKIP: tmux not installed (apt-get install tmux)"; exit 77; }
if "$bin" tui < /dev/null 2>&1 | grep -q "built without ncurses and readline"; then
    echo "SKIP: cosmos3 was built without ncurses and readline (apt-get install libncurses-dev libreadline-dev)"; exit 77
fi
unset COSMOS3_MODEL
sock="c3tui$$"
socks=()
cleanup() { for s in "${socks[@]}"; do tmux -L "$s" kill-server 2>/dev/null; done; }
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
. "${COSMOS3_SRCDIR:?}/tests/tmux_screen.sh"
screen() { t capture-pane -p > "$tmp/screen" 2>/dev/null; }
# start NAME COLS ROWS ARGS...: a fresh tmux server running the TUI
start() {
    sock="c3tui$$$1"; socks+=("$sock"); shift
    local x=$1 y=$2; shift 2
    t new-session -d -x "$x" -y "$y" -c "$tmp" \
        "env LANG=C.UTF-8 XDG_STATE_HOME='$tmp/state' $* ; echo EXIT=\$?; sleep 60"
}
still_up() { screen; grep -q '^ cosmos3 tui' "$tmp/screen" && ! grep -q '^EXIT=' "$tmp/screen"; }

# without a terminal: one line naming the fix
"$bin" tui < /dev/null > out 2> err
rc=$?
[ $rc = 2 ] && grep -q "needs a terminal" err && ok || bad "tui without a terminal: exit $rc: $(cat err)"

# 1. a prompt typed at once: every key reaches the input line, q and c included
start a 100 30 "'$bin' tui -S 3 -o first.png"
t send-keys -l 'a quiet red circle on a blue background, at the top'
t send-keys Enter
expect_screen 'wrote first.png \(seed 3, ' "a prompt typed straight after start generates" 20
still_up && ok || bad "the TUI is gone after a prompt with q and c in it: $(cat "$tmp/screen")"
grep -q '^prompt: a quiet red circle on a blue background, at the top$' "$tmp/screen" && ok ||
    bad "the prompt panel lacks the whole typed prompt"
[ -f first.png ] && ok || bad "first.png not written"
t kill-server 2>/dev/null

# 2. the dashboard during a run
steps=30
start b 140 45 "'$bin' tui -W 512 -H 512 --steps $steps --guidance-interval none --seed 3 -p 'a red circle on a blue background'"
expect_screen 'CPU .*rank 0 \[' "device panel" 15
expect_screen 'weights [0-9.]+ [KMG]iB +K/V [0-9.]+ [KMG]iB +activations [0-9.]+ [KMG]iB +free [0-9.]+ [KMG]iB \(host\)' \
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
expect_screen '^ Enter runs .*F2 preview on .*F10 quit' "key help"
expect_screen '^cosmos3 > ' "the input line"
# the input line runs the REPL's commands and prompts
t send-keys 'set steps 2' Enter
expect_screen '^steps = 2' "set through the input line" 5
t send-keys 'set width 32' Enter 'set height 32' Enter 'seed 4' Enter
t send-keys 'a green square on a red background' Enter
expect_screen '\] 2/2 steps' "second run progress" 20
expect_screen 'wrote cosmos3-4.png' "second run written" 20
[ -f cosmos3-3.png ] && [ -f cosmos3-4.png ] && ok || bad "PNGs missing: $(ls)"

# 3. a long run: typing goes on, a line entered meanwhile is queued
t send-keys 'set width 512' Enter 'set height 512' Enter 'set steps 300' Enter 'seed 5' Enter
t send-keys 'a yellow circle on a black background' Enter
expect_screen '\] [0-9]+/300 steps .*running' "the long run" 20
t send-keys 'set steps 2' Enter
expect_screen 'queued \(runs when the generation ends\): set steps' "a line entered during a run is queued" 5
t send-keys -l 'a quick cyan cat'
expect_screen '^cosmos3 > a quick cyan cat$' "keys typed during a run stay on the input line" 5
t send-keys F10
expect_screen 'Quit and lose it\? y quits' "F10 during a run asks first" 5
t send-keys n
expect_screen 'not quitting; the generation goes on' "any other key goes on" 5
still_up && ok || bad "the TUI quit although the answer was n"
grep -q '^cosmos3 > a quick cyan cat$' "$tmp/screen" && ok || bad "the answer key changed the input line"
t send-keys C-u
sleep 0.3 # Ctrl-C is a signal: it would overtake the C-u still in the terminal's queue
# Ctrl-C cancels the run; the queued line comes back to the input line
t send-keys C-c
expect_screen 'generation cancelled|cancelled; the model is still loaded' "Ctrl-C cancels the run" 20
expect_screen '^cosmos3 > set steps 2$' "the queued line is back on the input line" 5
t send-keys Enter
expect_screen '^steps = 2' "the line runs" 5
t send-keys F2
expect_screen 'F2 preview off' "F2 toggles the preview" 5
t send-keys F10
expect_screen '^EXIT=0$' "F10 when idle quits with 0" 10
screen
grep -q 'cosmos3 tui' "$tmp/screen" && bad "the dashboard is still on screen after F10 (terminal not restored)" || ok
t kill-server 2>/dev/null

# F10 + y during a run quits with 130, nothing written
start c 100 30 "'$bin' tui -W 512 -H 512 --steps 300 -S 9 -p 'a red circle on a blue background'"
expect_screen '\] [0-9]+/300 steps .*running' "a run to quit" 20
t send-keys F10
expect_screen 'Quit and lose it\?' "the question" 5
t send-keys y
expect_screen '^EXIT=130$' "y quits during a run with 130" 20
[ -f cosmos3-9.png ] && bad "a quit run wrote its image" || ok
t kill-server 2>/dev/null

# 4. Ctrl-C when idle: a note, not an exit; twice within a second exits 130
start d 100 30 "env NO_COLOR=1 '$bin' tui -W 32 -H 32 --steps 2"
expect_screen 'loaded demo' "second dashboard" 15
t send-keys C-c
expect_screen 'nothing to cancel; F10 or Ctrl-D' "one Ctrl-C at idle" 5
still_up && ok || bad "one Ctrl-C at idle quit the TUI"
sleep 1.2
t send-keys C-c
sleep 0.3
t send-keys C-c
expect_screen '^EXIT=130$' "two Ctrl-C within a second exit 130" 10
t kill-server 2>/dev/null

# 5. 80x24: nothing cut, and readable on a light background
start e 80 24 "'$bin' tui -S 77 -o 'an-output-name-long-enough-to-wrap-in-the-log.png' -p 'a red circle on a blue background'"
expect_screen 'wrote an-output-name' "80x24 generation" 20
sleep 0.5
screen
[ "$(LC_ALL=C.UTF-8 wc -L < "$tmp/screen")" -le 80 ] && ok || bad "lines wider than 80 columns"
grep -qE '\(seed 77, [0-9.]+ s\)' "$tmp/screen" && ok || bad "the seed is cut at 80x24: $(cat "$tmp/screen")"
grep -qE 'cond and uncond (as one batch|in turn) on rank 0' "$tmp/screen" && ok || bad "the layout line is cut at 80x24"
grep -qE 'plan: K/V ~[0-9.]+ [KMG]iB act ~[0-9.]+ [KMG]iB' "$tmp/screen" && ok || bad "the plan is dropped at 80x24"
grep -qE '(idle|running)$' "$tmp/screen" && ok || bad "the progress line is cut at 80x24"
grep -qE 'F10 quit' "$tmp/screen" && ok || bad "the key bar is cut at 80x24"
t capture-pane -p -e > "$tmp/screen-e"
# white (37, 97) or dim (2) text vanishes on a white background
grep -qE $'\e\\[([0-9;]*;)?(37|97|2)(;[0-9;]*)?m' "$tmp/screen-e" && bad "light grey or dim text on screen" || ok
t kill-server 2>/dev/null

# 6. (issue 36) the engine's warnings in the log, the devices filled at start,
#    one "cancelled" line, and no error printed again after quitting
start f 120 40 "'$bin' tui -W 32 -H 32 --steps 2 -S 5 --overwrite"
expect_screen 'loaded demo' "third dashboard" 15
sleep 0.5
screen
grep -q 'N/A (no model)' "$tmp/screen" && bad "devices: N/A before the first run: $(grep devices "$tmp/screen")" || ok
grep -qE 'CPU .*rank 0 \[' "$tmp/screen" && ok || bad "the device panel is empty at start"
t send-keys -l 'a quiet red circle on a blue background'
t send-keys Enter
expect_screen 'does not know "quiet"' "the demo's vocabulary warning in the TUI's log" 20
expect_screen 'trained at 64x64' "the demo's size warning in the TUI's log" 5
t send-keys -l 'set steps 400'
t send-keys Enter
t send-keys -l 'set width 256'
t send-keys Enter
t send-keys -l 'a red circle on a blue background'
t send-keys Enter
expect_screen '[0-9]+/400 steps' "a long run" 20
t send-keys C-c
expect_screen 'cancelled; the model is still loaded' "the cancel" 20
sleep 0.5
screen
[ "$(grep -c 'cancelled; the model is still loaded' "$tmp/screen")" = 1 ] && ! grep -q 'generation cancelled' "$tmp/screen" && ok ||
    bad "more than one cancelled line: $(grep cancel "$tmp/screen")"
t send-keys -l 'set output nodir/x.png'
t send-keys Enter
expect_screen 'the folder nodir does not exist' "an error in the log" 10
t send-keys F10
expect_screen '^EXIT=0$' "F10 quits" 10
grep -q '^cosmos3: .*nodir' "$tmp/screen" && bad "the last error printed again after quitting" || ok
t kill-server 2>/dev/null

finish tui
